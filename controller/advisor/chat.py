"""The agent's chat model: one of the operator admin's OpenAI-compatible endpoints (a hosted API, or the managed
vLLM itself), with the policy's limits (timeout, completion tokens, temperature)."""

from __future__ import annotations

from collections.abc import Mapping

from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from controller.advisor.endpoints import AdvisorEndpoint
from controller.policy import LlmSettings


def make_chat_model(
    endpoint: AdvisorEndpoint, settings: LlmSettings, *, environ: Mapping[str, str] | None = None
) -> ChatOpenAI:
    """A ``ChatOpenAI`` on the admin's ``endpoint`` (URL, model, key) with the policy's ``settings`` (timeout,
    capped output, temperature), and no hidden retries."""
    key = endpoint.api_key(environ) or "unused"  # local vLLM endpoints need no key
    return ChatOpenAI(
        model=endpoint.model,
        base_url=endpoint.base_url,
        api_key=SecretStr(key),
        timeout=settings.timeout_s,
        max_retries=0,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
    )


__all__ = ["make_chat_model"]
