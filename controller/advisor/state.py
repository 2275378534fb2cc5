"""The agent graph's state: plain JSON (checkpointed, so a restarted operator resumes where the graph stopped),
the answers it is resumed with, the results it hands back, and the (de)serialising of an Advisor context."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from controller.advisor.tools import best_measured
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.proposal import AdvisorContext, Proposal
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult

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


def proposal_dict(config: EngineConfig, rationale: str, by: str) -> dict[str, Any]:
    return {"config": config.model_dump(mode="json"), "rationale": rationale, "proposed_by": by}


def proposal(d: dict[str, Any]) -> Proposal:
    return Proposal(EngineConfig.model_validate(d["config"]), str(d["rationale"]), str(d["proposed_by"]))


def state_context(state: AgentState) -> AdvisorContext:
    """The Advisor context the graph runs on, with the trial history so far."""
    return context_from_state(state["context"], state.get("history", []))


def base_config(state: AgentState, which: str) -> EngineConfig:
    """The config a change applies to: the best measured one (``which == "best"``), else the active one."""
    ctx = state_context(state)
    best = best_measured(ctx.history)
    return best.config if which == "best" and best is not None else ctx.active


__all__ = [
    "AGENT",
    "MAX_LLM_FAILURES",
    "OPTIMIZER",
    "AdvisorResult",
    "AgentRun",
    "AgentState",
    "ApprovalAnswer",
    "base_config",
    "context_from_state",
    "context_to_state",
    "proposal",
    "proposal_dict",
    "state_context",
]
