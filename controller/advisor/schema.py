"""What the model must answer: a typed, closed structure. Parsed from the model's text with pydantic, never
through the model's own tool-calling (small models do that badly).

The action set is a closed enum validated after parsing: whatever the prompt data says, the model can only ask
for trials of configs (each then checked by the guardrails) or say that nothing more is worth trying.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.domain.config import EngineConfig
from controller.domain.knobs import normalised
from controller.errors import InvalidInput

KnobName = Literal[
    "speculative_method",
    "num_speculative_tokens",
    "prompt_lookup_max",
    "async_scheduling",
    "mamba_ssm_cache_dtype",
    "mamba_cache_stochastic_rounding",
    "mamba_cache_philox_rounds",
    "mamba_backend",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "enable_prefix_caching",
    "max_cudagraph_capture_size",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "omp_num_threads",
]
Scalar = str | int | float | bool | None


class AgentAction(StrEnum):
    PROPOSE = "propose"  # request trials of the proposed configs
    STOP = "stop"  # nothing more is worth a trial


class ProposedChange(BaseModel):
    """One config, as knob changes on top of a base (the best measured config, or the active one)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: Literal["best", "active"] = "best"
    changes: dict[KnobName, Scalar] = Field(default_factory=dict, max_length=16)
    rationale: str = Field(min_length=1, max_length=1000)


class AgentAnswer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    action: AgentAction
    hypothesis: str = Field(min_length=1, max_length=2000)
    proposals: list[ProposedChange] = Field(default_factory=list, max_length=8)


#: The longest answer parsed at all (a valid answer, eight proposals of sixteen knobs with their rationales and the
#: hypothesis, is under 20,000 characters; the rest leaves room for chatter around it).
MAX_ANSWER_CHARS = 65_536
#: The deepest bracket nesting parsed: an answer nests three levels (answer, proposals, changes).
MAX_ANSWER_DEPTH = 16
FENCE = "```"


def _garbage(why: str, field: str = "answer") -> InvalidInput:
    return InvalidInput(why, source="llm", field=field)


def extract_json(text: str) -> str:
    """The JSON object in a model reply (code fences and chatter around it are dropped).

    One pass over the text (no backtracking pattern): the first fenced block (optionally tagged ``json``) whose body
    is one ``{...}`` object wins, else the span from the first ``{`` to the last ``}``."""
    for body in text.split(FENCE)[1:-1]:  # the pieces with a fence on each side
        body = body.removeprefix("json").strip()
        if body.startswith("{") and body.endswith("}"):
            return body
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise _garbage("no JSON object in the model's answer")
    return text[start : end + 1]


def nesting_depth(raw: str) -> int:
    """The deepest ``[``/``{`` nesting of a JSON text, brackets inside strings not counted (one pass)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in raw:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_answer(text: str) -> AgentAnswer:
    """Parse and validate a model reply. Raises :class:`InvalidInput` naming the field that failed.

    Whatever the answer holds, the only way out is an :class:`AgentAnswer` or an :class:`InvalidInput`: it is
    capped in length and nesting before any parser sees it, and any exception while parsing is garbage too."""
    if len(text) > MAX_ANSWER_CHARS:
        raise _garbage(f"the model's answer is {len(text)} characters long (at most {MAX_ANSWER_CHARS} are parsed)")
    try:
        raw = extract_json(text)
        depth = nesting_depth(raw)
        if depth > MAX_ANSWER_DEPTH:
            raise _garbage(f"the model's answer nests {depth} levels deep (at most {MAX_ANSWER_DEPTH})")
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise _garbage(f"the model's answer is not valid JSON: {exc}") from exc
        try:
            return AgentAnswer.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise _garbage(first["msg"], loc or "answer") from exc
    except InvalidInput:
        raise
    except Exception as exc:  # RecursionError, MemoryError's cousins, a parser bug: garbage, never a failed cycle
        raise _garbage(f"the model's answer could not be parsed ({type(exc).__name__})") from exc


def apply_change(base: EngineConfig, changes: dict[str, Any]) -> EngineConfig:
    """``base`` with ``changes`` applied; dependent knobs switched off when their parent is (e.g. k=0 for
    method none), and a method switched on without draft tokens starts at one (:func:`normalised`). Raises
    :class:`InvalidInput` when the result is not a valid EngineConfig."""
    values = base.model_dump()
    values.update(changes)
    try:
        return normalised(values, draft_tokens=1)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(first["msg"], source="llm", field=".".join(str(p) for p in first["loc"])) from exc


def answer_json_schema() -> dict[str, Any]:
    return AgentAnswer.model_json_schema()


__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_ANSWER_DEPTH",
    "AgentAction",
    "AgentAnswer",
    "KnobName",
    "ProposedChange",
    "apply_change",
    "extract_json",
    "nesting_depth",
    "parse_answer",
]
