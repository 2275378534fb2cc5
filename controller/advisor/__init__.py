"""The LangGraph tuning agent (an Advisor): an LLM proposes, the guardrails and the optimizer keep it honest.

- :mod:`controller.advisor.schema`: the closed action set and the typed answer the model must produce
- :mod:`controller.advisor.prompt`: prompt text; everything built from metrics or names is a delimited JSON data block
- :mod:`controller.advisor.tools`: what the agent may read (shape, SLO, history, failure logs, policy) and do
- :mod:`controller.advisor.graph`: the state graph, :class:`AgentAdvisor` (Advisor port) and :class:`TuningAgent`
- :mod:`controller.advisor.checkpoint`: a checkpointer whose state serialises to JSON (a file or a CR status)
- :mod:`controller.advisor.chat`: an OpenAI-compatible chat model from the policy's LLM settings
- :mod:`controller.advisor.scripted`: a deterministic chat model for tests and the benchmark
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controller.advisor.graph import AdvisorResult, AgentAdvisor, AgentRun, TuningAgent
    from controller.advisor.schema import AgentAction, AgentAnswer, ProposedChange

#: Public names and their modules, imported on first use: reading the admin's advisor settings
#: (:mod:`controller.advisor.endpoints`) must not load LangGraph.
_EXPORTS = {
    "AdvisorResult": "controller.advisor.graph",
    "AgentAdvisor": "controller.advisor.graph",
    "AgentRun": "controller.advisor.graph",
    "TuningAgent": "controller.advisor.graph",
    "AgentAction": "controller.advisor.schema",
    "AgentAnswer": "controller.advisor.schema",
    "ProposedChange": "controller.advisor.schema",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'controller.advisor' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = ["AdvisorResult", "AgentAction", "AgentAdvisor", "AgentAnswer", "AgentRun", "ProposedChange", "TuningAgent"]
