"""The ``hypothesise`` node: the one place the agent calls the chat model.

It asks for a hypothesis and proposals as JSON (parsed with pydantic into a closed action set) and turns them into
configs. Unavailable, slow (timeout), over the token budget, or garbage: the state says the optimizer takes over,
and why.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from controller.advisor.chat import describe_failure
from controller.advisor.prompt import SYSTEM_PROMPT, user_prompt
from controller.advisor.schema import apply_change, parse_answer
from controller.advisor.state import AGENT, MAX_LLM_FAILURES, AgentState, base_config, proposal_dict
from controller.advisor.tools import clean
from controller.domain.scrub import scrub_known
from controller.errors import InvalidInput
from controller.policy import Policy

log = logging.getLogger(__name__)


class Hypothesiser:
    """Calls ``chat_model`` (None: the optimizer proposes) within ``llm_timeout_s`` and the policy's token budget."""

    def __init__(self, policy: Policy, chat_model: BaseChatModel | None, llm_timeout_s: float) -> None:
        self.policy = policy
        self.chat_model = chat_model
        self.llm_timeout_s = llm_timeout_s

    def unusable(self, state: AgentState) -> str:
        if self.chat_model is None:
            return "no chat model configured (llm.enabled is false or no endpoint)"
        if state.get("llm_failures", 0) >= MAX_LLM_FAILURES:
            return f"the chat model failed {MAX_LLM_FAILURES} times in a row"
        return ""

    def hypothesise(self, state: AgentState) -> dict[str, Any]:
        why = self.unusable(state)
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
            return self._failed(
                state, calls, used + estimate, f"the chat model timed out after {self.llm_timeout_s:g}s"
            )
        except Exception as exc:  # any client error: connection refused, HTTP 5xx, auth, rate limit
            why = f"the chat model is unavailable: {describe_failure(exc)}"  # its status and kind, never its answer
            return self._failed(state, calls, used + estimate, why)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        text = str(reply.content) if isinstance(reply, AIMessage) else str(getattr(reply, "content", ""))
        usage = getattr(reply, "usage_metadata", None)
        spent = int(usage["total_tokens"]) if usage else estimate
        try:
            answer = parse_answer(text)
        except Exception as exc:  # parse_answer raises InvalidInput; anything else is garbage all the same
            return self._failed(state, calls, used + spent, f"the chat model returned garbage ({clean(exc, 300)})")
        base = base_config(state, "best")
        candidates, invalid = [], []
        for p in answer.proposals:
            try:
                cfg = apply_change(base_config(state, p.base) or base, {str(k): v for k, v in p.changes.items()})
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
            candidates.append(proposal_dict(cfg, scrub_known(clean(p.rationale, 500)), AGENT))
        return {
            "hypothesis": scrub_known(clean(answer.hypothesis, 1000)),
            "answer_action": answer.action.value,
            "candidates": candidates,
            "rejected": invalid,
            "tokens_used": used + spent,
            "llm_calls": calls,
            "llm_failures": 0,
            "use_optimizer": False,
        }

    def _failed(self, state: AgentState, calls: int, tokens: int, reason: str) -> dict[str, Any]:
        reason = scrub_known(reason)
        log.warning("agent falls back to the optimizer: %s", reason)
        return {
            "use_optimizer": True,
            "fallback_reason": reason,
            "llm_calls": calls,
            "llm_failures": state.get("llm_failures", 0) + 1,
            "tokens_used": tokens,
        }


__all__ = ["Hypothesiser"]
