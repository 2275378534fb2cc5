"""A policy's ``llm`` section: whether the LLM agent proposes candidates and which of the admin's advisors it uses."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from controller.policy.space import _STRICT

#: Keys an older or hostile policy may try in its ``llm`` section: where the agent's requests (and the API key) go.
#: They are admin settings (Helm values / the operator's environment), never a tenant's.
ADMIN_ONLY_LLM_KEYS: tuple[str, ...] = ("base_url", "model", "api_key_env", "api_key_file", "api_key_secret")


class LlmSettings(BaseModel):
    """Whether the LLM agent proposes candidates, and which of the operator admin's advisors it uses.

    The endpoint, model and API key of each advisor are the admin's (``llm.advisors`` in the Helm values); a policy
    can only switch the agent on or off, pick an advisor by name, and bound what it may spend."""

    model_config = _STRICT

    enabled: bool = False
    advisor: str = Field(
        default="default",
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="name of one of the operator admin's LLM advisors",
    )
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    max_tokens: int = Field(default=768, ge=16, le=32768, description="completion tokens per call")
    token_budget: int = Field(default=20000, ge=0, description="prompt + completion tokens per re-tune")
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_rejected_rounds: int = Field(default=1, ge=0, le=5, description="times rejections are fed back")

    @model_validator(mode="before")
    @classmethod
    def _no_endpoint(cls, data: Any) -> Any:
        if isinstance(data, dict):
            tried = [k for k in ADMIN_ONLY_LLM_KEYS if k in data]
            if tried:
                raise ValueError(
                    f"llm.{tried[0]} is an operator admin setting: the LLM endpoint, model and API key are set in "
                    "the operator's Helm values (llm.advisors); a policy may only set llm.enabled and pick an "
                    "advisor by name (llm.advisor)"
                )
        return data


__all__ = ["ADMIN_ONLY_LLM_KEYS", "LlmSettings"]
