"""The agent's chat model: any OpenAI-compatible endpoint (a hosted API, or the managed vLLM itself)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from controller.errors import InvalidInput
from controller.policy import LlmSettings


def resolve_api_key(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key from the mounted Secret file (preferred) or the environment variable; None if neither."""
    env = os.environ if environ is None else environ
    if settings.api_key_file:
        path = Path(settings.api_key_file)
        try:
            key = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidInput(f"cannot read the API key: {exc.strerror or exc}", source=str(path)) from exc
        if key:
            return key
    if settings.api_key_env:
        return env.get(settings.api_key_env) or None
    return None


def make_chat_model(settings: LlmSettings, *, environ: Mapping[str, str] | None = None) -> ChatOpenAI:
    """A ``ChatOpenAI`` for ``settings``: base URL, model, key, timeout, no hidden retries, capped output."""
    key = resolve_api_key(settings, environ) or "unused"  # local vLLM endpoints need no key
    return ChatOpenAI(
        model=settings.model,
        base_url=settings.base_url,
        api_key=SecretStr(key),
        timeout=settings.timeout_s,
        max_retries=0,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
    )


__all__ = ["make_chat_model", "resolve_api_key"]
