"""The tuning agent as a LangGraph state graph, inside hard guardrails.

::

    observe -> hypothesise -> propose -> validate -> trial -> analyse -> decide -> plan_rollout
                   ^             ^          |                   |                        |
                   |  (rejected, |          |  (budget left)    |                  await_approval (interrupt)
                   |   fed back  |          v                   v                        |
                   +--- once) ---+------ observe <----------- analyse                roll_out

* **observe** reads the tools (traffic and SLO, trial history, failure logs, the policy) into evidence.
* **hypothesise** asks the chat model for a hypothesis and proposals as JSON (parsed with pydantic into a closed
  action set). Unavailable, slow (timeout), over the token budget, or garbage: the optimizer takes over.
* **propose** turns the answer into configs (or asks the optimizer when the agent is out).
* **validate** runs the guardrails; rejections are fed back to the model once (``llm.max_rejected_rounds``),
  then the optimizer proposes instead.
* **trial / analyse** (tune mode only) request trials through the injected trial runner, within the budget.
* **decide / plan_rollout / await_approval / roll_out**: the best measured config beats the active one by
  ``min_gain``? Plan the policy's rollout steps, wait for an approval (a LangGraph ``interrupt`` resumed from the
  CLI or the CR status) when the policy asks for one, then roll out, or, in dry-run mode, only report.

The same graph serves the Advisor port (:class:`AgentAdvisor`: observe..validate, then return the accepted
proposals) and a self-contained tuning run (:class:`TuningAgent`). State is plain JSON and checkpointed, so a
restarted operator resumes the graph where it stopped (see :mod:`controller.advisor.checkpoint`).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.advisor.checkpoint import SerializableSaver
from controller.advisor.prompt import SYSTEM_PROMPT, user_prompt
from controller.advisor.schema import AgentAction, apply_change, parse_answer
from controller.advisor.tools import (
    TrialRunner,
    best_measured,
    clean,
    config_knobs,
    read_failure_logs,
    read_policy,
    read_traffic_and_slo,
    read_trial_history,
)
from controller.decide.guardrails import budget_left, check_proposals
from controller.decide.optimizer import OptimizerAdvisor
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult
from controller.errors import InvalidInput
from controller.policy import Policy

log = logging.getLogger(__name__)

AGENT = "agent"
OPTIMIZER = "optimizer"
#: Consecutive LLM failures after which the agent stops calling the model for this thread.
MAX_LLM_FAILURES = 3


class AgentState(TypedDict, total=False):
    mode: str  # "advise" | "tune"
    context: dict[str, Any]
    history: list[dict[str, Any]]
    evidence: dict[str, Any]
    hypothesis: str
    answer_action: str
    candidates: list[dict[str, Any]]
    accepted: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    rejected_rounds: int
    use_optimizer: bool
    fallback_reason: str
    route: str
    tokens_used: int
    llm_calls: int
    llm_failures: int
    records: list[dict[str, Any]]
    decision: dict[str, Any] | None
    rollout: dict[str, Any] | None
    approval: dict[str, Any] | None
    outcome: str


class ApprovalAnswer(BaseModel):
    """The value an ``await_approval`` interrupt is resumed with (from ``shiftctl approve`` or the status)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision: Literal["approved", "rejected"]
    by: str = Field(min_length=1, max_length=253)
    comment: str = Field(default="", max_length=2000)


@dataclass(frozen=True)
class AdvisorResult:
    """What one advise round produced, and why. ``dry_run``: the policy says report only, roll out nothing."""

    proposals: tuple[Proposal, ...]
    records: tuple[dict[str, Any], ...]
    hypothesis: str
    fallback_reason: str
    tokens_used: int
    dry_run: bool

    @property
    def proposed_by(self) -> str:
        who = {p.proposed_by for p in self.proposals}
        return who.pop() if len(who) == 1 else ("mixed" if who else "none")


@dataclass(frozen=True)
class AgentRun:
    """Snapshot of a tuning run: where the graph is and what it decided."""

    thread_id: str
    awaiting_approval: bool
    state: dict[str, Any]

    @property
    def decision(self) -> dict[str, Any] | None:
        d = self.state.get("decision")
        return d if isinstance(d, dict) else None

    @property
    def outcome(self) -> str:
        return str(self.state.get("outcome", ""))

    @property
    def trials(self) -> list[TrialResult]:
        return [TrialResult.model_validate(t) for t in self.state.get("history", [])]

    @property
    def records(self) -> list[dict[str, Any]]:
        return list(self.state.get("records", []))


# ----- (de)serialising the context ----------------------------------------------------------------------
def context_to_state(context: AdvisorContext) -> dict[str, Any]:
    return {
        "target": dataclasses.asdict(context.target),
        "shape": context.shape.model_dump(mode="json"),
        "slo": context.slo.model_dump(mode="json"),
        "active": context.active.model_dump(mode="json"),
        "max_proposals": context.max_proposals,
    }


def context_from_state(ctx: dict[str, Any], history: Sequence[dict[str, Any]]) -> AdvisorContext:
    return AdvisorContext(
        target=TargetRef(**ctx["target"]),
        shape=TrafficShape.model_validate(ctx["shape"]),
        slo=SLO.model_validate(ctx["slo"]),
        active=EngineConfig.model_validate(ctx["active"]),
        history=tuple(TrialResult.model_validate(h) for h in history),
        max_proposals=int(ctx["max_proposals"]),
    )


def _proposal_dict(config: EngineConfig, rationale: str, by: str) -> dict[str, Any]:
    return {"config": config.model_dump(mode="json"), "rationale": rationale, "proposed_by": by}


def _proposal(d: dict[str, Any]) -> Proposal:
    return Proposal(EngineConfig.model_validate(d["config"]), str(d["rationale"]), str(d["proposed_by"]))


class TuningAgent:
    """The agent graph. ``chat_model`` None (or ``policy.llm.enabled`` false) means the optimizer proposes.

    ``trial_runner`` (tune mode) requests one trial; ``rollout`` (tune mode) starts the approved rollout.
    ``llm_timeout_s`` defaults to the policy's ``llm.timeout_s``.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        chat_model: BaseChatModel | None = None,
        optimizer: OptimizerAdvisor | None = None,
        trial_runner: TrialRunner | None = None,
        rollout: Callable[[dict[str, Any]], None] | None = None,
        checkpointer: SerializableSaver | None = None,
        llm_timeout_s: float | None = None,
    ) -> None:
        self.policy = policy
        self.chat_model = chat_model if policy.llm.enabled else None
        self.optimizer = optimizer or OptimizerAdvisor(policy)
        self.trial_runner = trial_runner
        self.rollout = rollout
        self.checkpointer = checkpointer or SerializableSaver()
        self.llm_timeout_s = llm_timeout_s if llm_timeout_s is not None else policy.llm.timeout_s
        self.graph = self._build().compile(checkpointer=self.checkpointer)

    # ----- graph -----------------------------------------------------------------------------------
    def _build(self) -> StateGraph[AgentState]:
        g: StateGraph[AgentState] = StateGraph(AgentState)
        g.add_node("observe", self._observe)
        g.add_node("hypothesise", self._hypothesise)
        g.add_node("propose", self._propose)
        g.add_node("validate", self._validate)
        g.add_node("trial", self._trial)
        g.add_node("analyse", self._analyse)
        g.add_node("decide", self._decide)
        g.add_node("plan_rollout", self._plan_rollout)
        g.add_node("await_approval", self._await_approval)
        g.add_node("roll_out", self._roll_out)
        g.add_edge(START, "observe")
        g.add_edge("observe", "hypothesise")
        g.add_edge("hypothesise", "propose")
        g.add_edge("propose", "validate")
        g.add_conditional_edges(
            "validate",
            self._route,
            {"hypothesise": "hypothesise", "propose": "propose", "trial": "trial", "decide": "decide", "end": END},
        )
        g.add_edge("trial", "analyse")
        g.add_conditional_edges("analyse", self._route, {"observe": "observe", "decide": "decide"})
        g.add_conditional_edges("decide", self._route, {"plan_rollout": "plan_rollout", "end": END})
        g.add_edge("plan_rollout", "await_approval")
        g.add_edge("await_approval", "roll_out")
        g.add_edge("roll_out", END)
        return g

    @staticmethod
    def _route(state: AgentState) -> str:
        return state.get("route", "end")

    def _context(self, state: AgentState) -> AdvisorContext:
        return context_from_state(state["context"], state.get("history", []))

    # ----- nodes -----------------------------------------------------------------------------------
    def _observe(self, state: AgentState) -> dict[str, Any]:
        ctx = self._context(state)
        evidence = read_traffic_and_slo(ctx)
        evidence["history"] = read_trial_history(ctx.history)
        evidence["failure_logs"] = read_failure_logs(ctx.history)
        evidence["policy"] = read_policy(self.policy)
        evidence["budget"] = {
            "trials_left": budget_left(self.policy, ctx.history),
            "proposals_wanted": max(1, min(ctx.max_proposals, budget_left(self.policy, ctx.history) or 1)),
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

    def _llm_unusable(self, state: AgentState) -> str:
        if self.chat_model is None:
            return "no chat model configured (llm.enabled is false or no endpoint)"
        if state.get("llm_failures", 0) >= MAX_LLM_FAILURES:
            return f"the chat model failed {MAX_LLM_FAILURES} times in a row"
        return ""

    def _hypothesise(self, state: AgentState) -> dict[str, Any]:
        why = self._llm_unusable(state)
        if why:
            return {"use_optimizer": True, "fallback_reason": why}
        assert self.chat_model is not None
        data = dict(state.get("evidence", {}))
        if state.get("rejected_rounds", 0) > 0:
            data["rejected_last_round"] = [
                {"config": r["knobs"], "reasons": [clean(x, 300) for x in r["reasons"]]}
                for r in state.get("rejected", [])
                if r.get("proposed_by") == AGENT
            ]
        prompt = user_prompt(data)
        llm = self.policy.llm
        used = state.get("tokens_used", 0)
        estimate = (len(SYSTEM_PROMPT) + len(prompt)) // 4 + llm.max_tokens
        if used + estimate > llm.token_budget:
            return {
                "use_optimizer": True,
                "fallback_reason": f"token budget: {used} used + ~{estimate} needed > {llm.token_budget}",
            }
        messages = [SystemMessage(SYSTEM_PROMPT), HumanMessage(prompt)]
        calls = state.get("llm_calls", 0) + 1
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            reply = pool.submit(self.chat_model.invoke, messages).result(timeout=self.llm_timeout_s)
        except concurrent.futures.TimeoutError:
            return self._llm_failed(
                state, calls, used + estimate, f"the chat model timed out after {self.llm_timeout_s:g}s"
            )
        except Exception as exc:  # any client error: connection refused, HTTP 5xx, auth, rate limit
            why = f"the chat model is unavailable: {clean(exc, 200)}"
            return self._llm_failed(state, calls, used + estimate, why)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        text = str(reply.content) if isinstance(reply, AIMessage) else str(getattr(reply, "content", ""))
        usage = getattr(reply, "usage_metadata", None)
        spent = int(usage["total_tokens"]) if usage else estimate
        try:
            answer = parse_answer(text)
        except InvalidInput as exc:
            return self._llm_failed(state, calls, used + spent, f"the chat model returned garbage ({exc})")
        base = self._base(state, "best")
        candidates, invalid = [], []
        for p in answer.proposals:
            try:
                cfg = apply_change(self._base(state, p.base) or base, {str(k): v for k, v in p.changes.items()})
            except InvalidInput as exc:
                invalid.append(
                    {
                        "label": clean(p.changes, 200),
                        "knobs": {k: v for k, v in p.changes.items()},
                        "proposed_by": AGENT,
                        "kind": "invalid",
                        "reasons": [str(exc)],
                        "rationale": clean(p.rationale, 500),
                    }
                )
                continue
            candidates.append(_proposal_dict(cfg, clean(p.rationale, 500), AGENT))
        return {
            "hypothesis": clean(answer.hypothesis, 1000),
            "answer_action": answer.action.value,
            "candidates": candidates,
            "rejected": invalid,
            "tokens_used": used + spent,
            "llm_calls": calls,
            "llm_failures": 0,
            "use_optimizer": False,
        }

    def _llm_failed(self, state: AgentState, calls: int, tokens: int, reason: str) -> dict[str, Any]:
        log.warning("agent falls back to the optimizer: %s", reason)
        return {
            "use_optimizer": True,
            "fallback_reason": reason,
            "llm_calls": calls,
            "llm_failures": state.get("llm_failures", 0) + 1,
            "tokens_used": tokens,
        }

    def _base(self, state: AgentState, which: str) -> EngineConfig:
        ctx = self._context(state)
        best = best_measured(ctx.history)
        return best.config if which == "best" and best is not None else ctx.active

    def _propose(self, state: AgentState) -> dict[str, Any]:
        if not state.get("use_optimizer"):
            return {}
        ctx = self._context(state)
        reason = state.get("fallback_reason", "")
        props = self.optimizer.propose(ctx)
        return {
            "candidates": [
                _proposal_dict(p.config, f"{p.rationale} [optimizer takes over: {reason}]", p.proposed_by)
                for p in props
            ]
        }

    def _validate(self, state: AgentState) -> dict[str, Any]:
        ctx = self._context(state)
        proposals = [_proposal(c) for c in state.get("candidates", [])]
        verdict = check_proposals(
            proposals, policy=self.policy, active=ctx.active, history=ctx.history, max_accept=ctx.max_proposals
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
        accepted = [_proposal_dict(p.config, p.rationale, p.proposed_by) for p in verdict.accepted]
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

    def _trial(self, state: AgentState) -> dict[str, Any]:
        if self.trial_runner is None:
            raise RuntimeError("tune mode needs a trial_runner")
        ctx = self._context(state)
        history = list(state.get("history", []))
        ran: list[TrialResult] = list(ctx.history)
        for p in state.get("accepted", []):
            if budget_left(self.policy, ran) <= 0:
                break
            result = self.trial_runner(EngineConfig.model_validate(p["config"]))
            ran.append(result)
            history.append(result.model_dump(mode="json"))
        return {"history": history}

    def _analyse(self, state: AgentState) -> dict[str, Any]:
        ctx = self._context(state)
        stop = state.get("answer_action") == AgentAction.STOP.value and not state.get("use_optimizer")
        route = "observe" if budget_left(self.policy, ctx.history) > 0 and not stop else "decide"
        return {"route": route}

    def _decide(self, state: AgentState) -> dict[str, Any]:
        ctx = self._context(state)
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

    def _plan_rollout(self, state: AgentState) -> dict[str, Any]:
        decision = state.get("decision") or {}
        cfg = EngineConfig.model_validate(decision["config"])
        ctx = self._context(state)
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

    def _await_approval(self, state: AgentState) -> dict[str, Any]:
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

    def _roll_out(self, state: AgentState) -> dict[str, Any]:
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

    # ----- running -----------------------------------------------------------------------------------
    @staticmethod
    def _config(thread_id: str) -> RunnableConfig:
        return {"configurable": {"thread_id": thread_id}, "recursion_limit": 400}

    def invoke(self, thread_id: str, context: AdvisorContext, *, mode: str) -> dict[str, Any]:
        inp: AgentState = {
            "mode": mode,
            "context": context_to_state(context),
            "history": [h.model_dump(mode="json") for h in context.history],
            "decision": None,
            "rollout": None,
            "approval": None,
            "outcome": "",
            "route": "",
            "records": [],
        }
        out = self.graph.invoke(inp, self._config(thread_id))
        return dict(out)

    def start(self, thread_id: str, context: AdvisorContext) -> AgentRun:
        """Run a whole tuning round (trials within the budget, decision, rollout plan) until done or waiting."""
        self.invoke(thread_id, context, mode="tune")
        return self.snapshot(thread_id)

    def resume(self, thread_id: str, approval: dict[str, Any]) -> AgentRun:
        """Resume a run waiting at the approval gate (``{"decision": "approved", "by": "alice"}``)."""
        self.graph.invoke(Command(resume=approval), self._config(thread_id))
        return self.snapshot(thread_id)

    def snapshot(self, thread_id: str) -> AgentRun:
        snap = self.graph.get_state(self._config(thread_id))
        return AgentRun(thread_id, awaiting_approval="await_approval" in snap.next, state=dict(snap.values))


class AgentAdvisor:
    """The agent behind the Advisor port: observe -> hypothesise -> propose -> validate, then the accepted
    proposals. Never raises for LLM trouble: the optimizer takes over and the result says why."""

    def __init__(
        self,
        policy: Policy,
        *,
        chat_model: BaseChatModel | None = None,
        optimizer: OptimizerAdvisor | None = None,
        checkpointer: SerializableSaver | None = None,
        checkpoint_path: str | Path | None = None,
        llm_timeout_s: float | None = None,
    ) -> None:
        self.policy = policy
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path is not None else None
        if checkpointer is None and self.checkpoint_path is not None:
            checkpointer = SerializableSaver.load(self.checkpoint_path)
        self.agent = TuningAgent(
            policy,
            chat_model=chat_model,
            optimizer=optimizer,
            checkpointer=checkpointer,
            llm_timeout_s=llm_timeout_s,
        )

    @property
    def checkpointer(self) -> SerializableSaver:
        return self.agent.checkpointer

    @staticmethod
    def thread_id(context: AdvisorContext) -> str:
        return f"advise:{context.target}:{context.shape.bucket()}"

    def advise(self, context: AdvisorContext) -> AdvisorResult:
        if context.max_proposals <= 0:
            return AdvisorResult((), (), "", "no proposals wanted", 0, self.policy.dry_run)
        thread = self.thread_id(context)
        state = self.agent.invoke(thread, context, mode="advise")
        self.checkpointer.prune([thread])
        if self.checkpoint_path is not None:
            self.checkpointer.save(self.checkpoint_path)
        proposals = tuple(_proposal(a) for a in state.get("accepted", []))
        return AdvisorResult(
            proposals=proposals,
            records=tuple(state.get("records", [])),
            hypothesis=str(state.get("hypothesis", "")),
            fallback_reason=str(state.get("fallback_reason", "")),
            tokens_used=int(state.get("tokens_used", 0)),
            dry_run=self.policy.dry_run,
        )

    def propose(self, context: AdvisorContext) -> list[Proposal]:
        return list(self.advise(context).proposals)


def mermaid() -> str:
    """The compiled graph as a Mermaid diagram (for docs/decide.md)."""
    agent = TuningAgent(Policy())
    return agent.graph.get_graph().draw_mermaid()


_EDGE_LABELS = {
    ("validate", "hypothesise"): "rejected: fed back once",
    ("validate", "propose"): "rejected again: optimizer takes over",
    ("validate", "trial"): "accepted (tune)",
    ("validate", "__end__"): "accepted (advise)",
    ("validate", "decide"): "nothing left to try",
    ("analyse", "observe"): "budget left",
    ("analyse", "decide"): "budget spent / stop",
    ("decide", "plan_rollout"): "beats active by min_gain",
    ("decide", "__end__"): "keep active",
}


def dot() -> str:
    """The compiled graph as Graphviz DOT (``dot -Tpng`` renders the picture in docs/decide.md)."""
    g = TuningAgent(Policy()).graph.get_graph()
    lines = ["digraph agent {", '  rankdir=TB; node [shape=box, style="rounded,filled", fillcolor="#f2f0ff"];']
    for node_id in g.nodes:
        shape = ', shape=oval, fillcolor="#bfb6fc"' if node_id.startswith("__") else ""
        lines.append(f'  "{node_id}" [label="{node_id.strip("_")}"{shape}];')
    for e in g.edges:
        label = _EDGE_LABELS.get((e.source, e.target), "")
        style = f' [style=dashed, label="{label}", fontsize=10]' if e.conditional else ""
        lines.append(f'  "{e.source}" -> "{e.target}"{style};')
    lines.append("}")
    return "\n".join(lines) + "\n"


__all__ = ["AdvisorResult", "AgentAdvisor", "AgentRun", "AgentState", "ApprovalAnswer", "TuningAgent", "dot", "mermaid"]
