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

This module builds and runs the graph; the state lives in :mod:`controller.advisor.state`, the chat-model call in
:mod:`controller.advisor.hypothesis`, the search loop's nodes in :mod:`controller.advisor.search` and the decision's
in :mod:`controller.advisor.decision`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from controller.advisor.checkpoint import SerializableSaver
from controller.advisor.decision import DecisionNodes
from controller.advisor.hypothesis import Hypothesiser
from controller.advisor.search import SearchNodes
from controller.advisor.state import (
    AdvisorResult,
    AgentRun,
    AgentState,
    ApprovalAnswer,
    context_to_state,
    proposal,
)
from controller.advisor.tools import TrialRunner
from controller.decide import OptimizerAdvisor
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.scrub import scrub_known
from controller.policy import Policy


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
        self.hypothesiser = Hypothesiser(policy, self.chat_model, self.llm_timeout_s)
        self.search = SearchNodes(policy, self.optimizer, trial_runner)
        self.decision = DecisionNodes(policy, rollout)
        self.graph = self._build().compile(checkpointer=self.checkpointer)

    # ----- graph -----------------------------------------------------------------------------------
    def _build(self) -> StateGraph[AgentState]:
        g: StateGraph[AgentState] = StateGraph(AgentState)
        g.add_node("observe", self.search.observe)
        g.add_node("hypothesise", self.hypothesiser.hypothesise)
        g.add_node("propose", self.search.propose)
        g.add_node("validate", self.search.validate)
        g.add_node("trial", self.search.trial)
        g.add_node("analyse", self.search.analyse)
        g.add_node("decide", self.decision.decide)
        g.add_node("plan_rollout", self.decision.plan_rollout)
        g.add_node("await_approval", self.decision.await_approval)
        g.add_node("roll_out", self.decision.roll_out)
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
        proposals = tuple(proposal(a) for a in state.get("accepted", []))
        return AdvisorResult(
            proposals=proposals,
            records=tuple(state.get("records", [])),
            hypothesis=scrub_known(str(state.get("hypothesis", ""))),
            fallback_reason=scrub_known(str(state.get("fallback_reason", ""))),
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
