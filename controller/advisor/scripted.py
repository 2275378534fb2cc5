"""A deterministic, LangChain-compatible chat model for tests, demos and the benchmark.

``ScriptedChatModel(script=[...])`` answers each call with the next step of its script; a step is a reply string,
an exception instance (raised, e.g. a timeout), or a callable ``messages -> str``. After the last step it keeps
repeating it. :func:`heuristic_responder` is a script step that follows the field-notes heuristics (MTP1 at
high concurrency and MTP3 at low, async scheduling on, the flashinfer Mamba backend, fp16 SSM state with
stochastic rounding, enough batch slots and CUDA-graph coverage), then explores one knob at a time around the
best measured config.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from controller.advisor.prompt import read_data_block
from controller.domain.config import STOCK

Responder = Callable[[Sequence[BaseMessage]], str]
ScriptStep = str | BaseException | Responder


class ScriptedChatModel(BaseChatModel):
    """Replays a script. ``delay_s`` makes every call slow (to exercise timeouts)."""

    script: list[Any]
    delay_s: float = 0.0
    _calls: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "shiftlight-scripted"

    @property
    def calls(self) -> list[list[BaseMessage]]:
        """Every prompt received, in order."""
        return list(self._calls)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            n = len(self._calls)
            self._calls.append(list(messages))
        if self.delay_s:
            time.sleep(self.delay_s)
        step = self.script[min(n, len(self.script) - 1)] if self.script else ""
        if isinstance(step, BaseException):
            raise step
        text = step if isinstance(step, str) else step(messages)
        prompt_tokens = sum(len(str(m.content)) for m in messages) // 4
        msg = AIMessage(
            content=text,
            usage_metadata={
                "input_tokens": prompt_tokens,
                "output_tokens": len(text) // 4,
                "total_tokens": prompt_tokens + len(text) // 4,
            },
        )
        return ChatResult(generations=[ChatGeneration(message=msg)])


# ----- the field-notes heuristic ----------------------------------------------------------------------
def _nearest(allowed: list[Any], want: Any) -> Any:
    nums = [a for a in allowed if isinstance(a, int | float) and not isinstance(a, bool)]
    if not nums:
        return allowed[0]
    return min(nums, key=lambda a: (abs(a - want), a))


def _first_at_least(allowed: list[Any], want: float) -> Any:
    nums = sorted(a for a in allowed if isinstance(a, int | float) and not isinstance(a, bool))
    return next((a for a in nums if a >= want), nums[-1] if nums else None)


def _compact(cfg: dict[str, Any]) -> dict[str, Any]:
    stock = STOCK.model_dump()
    out = {k: v for k, v in cfg.items() if k in stock and stock[k] != v}
    if out.get("speculative_method", "none") == "none":
        out.pop("num_speculative_tokens", None)
    if out.get("mamba_ssm_cache_dtype") != "float16":
        out.pop("mamba_cache_stochastic_rounding", None)
    return out


def _key(cfg: dict[str, Any]) -> str:
    return json.dumps(_compact(cfg), sort_keys=True)


def field_notes_recipe(data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The field-notes recipe for this traffic, restricted to the policy's allowed values."""
    knobs: dict[str, list[Any]] = data.get("policy", {}).get("tunable_knobs", {})
    traffic = data.get("traffic", {})
    c = float(traffic.get("concurrency", 1) or 1)
    rep = float(traffic.get("repetitiveness", 0) or 0)
    out: dict[str, Any] = {}
    why: list[str] = []
    methods = knobs.get("speculative_method", [])
    k = 0
    if "mtp" in methods:
        k = _nearest(knobs.get("num_speculative_tokens", [1, 3]), 1 if c >= 32 else 3)
        out |= {"speculative_method": "mtp", "num_speculative_tokens": k}
        why.append(f"MTP{k}: {'the GPU is already full at' if c >= 32 else 'spare compute at'} {c:.0f} streams")
    elif rep >= 0.3 and ("ngram_gpu" in methods or "ngram" in methods):
        method = "ngram_gpu" if "ngram_gpu" in methods else "ngram"
        k = _nearest(knobs.get("num_speculative_tokens", [4]), 4)
        out |= {"speculative_method": method, "num_speculative_tokens": k}
        why.append(f"lookup drafting: {rep:.0%} of the output copies the context")
    elif methods:
        out["speculative_method"] = "none"
    if True in knobs.get("async_scheduling", []) and out.get("speculative_method") not in ("ngram", "suffix"):
        out["async_scheduling"] = True
        why.append("async scheduling overlaps CPU scheduling with GPU work")
    if "flashinfer" in knobs.get("mamba_backend", []):
        out["mamba_backend"] = "flashinfer"
        why.append("flashinfer Mamba kernel")
    if "float16" in knobs.get("mamba_ssm_cache_dtype", []):
        out["mamba_ssm_cache_dtype"] = "float16"
        if True in knobs.get("mamba_cache_stochastic_rounding", []):
            out["mamba_cache_stochastic_rounding"] = True
        why.append("fp16 SSM state with stochastic rounding")
    seqs = None
    if knobs.get("max_num_seqs"):
        seqs = _first_at_least(knobs["max_num_seqs"], c)
        out["max_num_seqs"] = seqs
    if knobs.get("max_num_batched_tokens"):
        out["max_num_batched_tokens"] = _nearest(knobs["max_num_batched_tokens"], 8192)
    if knobs.get("max_cudagraph_capture_size") and seqs:
        cover = _first_at_least(knobs["max_cudagraph_capture_size"], seqs * (1 + k))
        if cover is not None and cover >= seqs * (1 + k):
            out["max_cudagraph_capture_size"] = cover
            why.append("CUDA graphs cover max_num_seqs x (1+k)")
    return out, "; ".join(why) or "stock batching"


def _neighbours(best: dict[str, Any], knobs: dict[str, list[Any]], c: float) -> list[tuple[dict[str, Any], str]]:
    """One-knob changes to the best config, in the order the field notes suggest testing them."""
    out: list[tuple[dict[str, Any], str]] = []
    k = best.get("num_speculative_tokens", 0)
    if best.get("speculative_method", "none") != "none":
        for alt in sorted(knobs.get("num_speculative_tokens", []), key=lambda v: abs(v - k)):
            if alt != k:
                out.append(({"num_speculative_tokens": alt}, f"compare MTP{alt} with MTP{k} at this concurrency"))
    order = [
        "max_num_seqs",
        "max_num_batched_tokens",
        "async_scheduling",
        "mamba_backend",
        "mamba_ssm_cache_dtype",
        "max_cudagraph_capture_size",
        "speculative_method",
        "kv_cache_dtype",
        "enable_prefix_caching",
        "gpu_memory_utilization",
        "mamba_cache_stochastic_rounding",
    ]
    for knob in order:
        allowed = knobs.get(knob, [])
        cur = best.get(knob, STOCK.model_dump()[knob])
        if cur in allowed and all(isinstance(a, int) and not isinstance(a, bool) for a in allowed if a is not None):
            nums = sorted(a for a in allowed if a is not None)
            i = nums.index(cur) if cur in nums else -1
            alts = [nums[j] for j in (i + 1, i - 1) if 0 <= j < len(nums) and i >= 0]
        else:
            alts = [a for a in allowed if a != cur]
        for alt in alts:
            change: dict[str, Any] = {knob: alt}
            if knob == "speculative_method" and alt != "none" and not k:
                change["num_speculative_tokens"] = _nearest(
                    knobs.get("num_speculative_tokens", [1]), 1 if c >= 32 else 3
                )
            out.append((change, f"test {knob}={alt} one change at a time"))
    return out


def heuristic_responder(messages: Sequence[BaseMessage]) -> str:
    """Script step: read the data block and answer like a careful engineer following the field notes."""
    text = str(messages[-1].content) if messages else ""
    data = read_data_block(text) or {}
    knobs: dict[str, list[Any]] = data.get("policy", {}).get("tunable_knobs", {})
    wanted = int(data.get("budget", {}).get("proposals_wanted", 1) or 1)
    c = float(data.get("traffic", {}).get("concurrency", 1) or 1)
    history: list[dict[str, Any]] = data.get("history", [])
    active: dict[str, Any] = data.get("active_config", {})
    seen = {_key(h.get("config", {})) for h in history} | {_key(active)}
    seen |= {_key(r.get("config", {})) for r in data.get("rejected_last_round", []) if isinstance(r, dict)}
    measured = [h for h in history if h.get("status") == "measured"]
    proposals: list[dict[str, Any]] = []
    recipe, why = field_notes_recipe(data)
    full_recipe = {**active, **recipe}
    if _key(full_recipe) not in seen:
        proposals.append({"base": "active", "changes": recipe, "rationale": f"field-notes recipe: {why}"})
        seen.add(_key(full_recipe))
    if measured:
        best = max(measured, key=lambda h: h.get("goodput_tokens_per_s", 0)).get("config", {})
        base = "best"
    else:
        best, base = full_recipe, "active"
    for change, reason in _neighbours(best, knobs, c):
        if len(proposals) >= wanted:
            break
        cand = {**best, **change}
        if _key(cand) in seen:
            continue
        seen.add(_key(cand))
        proposals.append(
            {"base": base, "changes": change if base == "best" else {**recipe, **change}, "rationale": reason}
        )
    action = "propose" if proposals else "stop"
    hypothesis = (
        f"At {c:.0f} concurrent streams the recipe is: {why}."
        if not measured
        else "Refine the best measured config one knob at a time."
    )
    return json.dumps({"action": action, "hypothesis": hypothesis, "proposals": proposals[:wanted]})


def heuristic_model(**kwargs: Any) -> ScriptedChatModel:
    return ScriptedChatModel(script=[heuristic_responder], **kwargs)


__all__ = ["ScriptedChatModel", "field_notes_recipe", "heuristic_model", "heuristic_responder"]
