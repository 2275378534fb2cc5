"""The LLM advisors an operator admin offers, by name: endpoint, model and API key are admin settings.

An advisor's endpoint receives the API key as a Bearer token, so only an operator admin (Helm values, the
operator's environment) may say where it is and which file holds its key. A tenant's policy may switch the LLM
off or pick one of these advisors by name (``llm.advisor``); it can never name a URL, a model or a path.

The chart renders the admin's ``llm.advisors`` list as ``SHIFTLIGHT_LLM_ADVISORS``: a JSON list of
``{"name", "base_url", "model", "api_key_file"}`` whose key files are mounted from Secrets. Nothing secret is in
the variable itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from controller.domain.scrub import strip_userinfo
from controller.errors import InvalidInput

ADVISORS_ENV = "SHIFTLIGHT_LLM_ADVISORS"

#: A Kubernetes-style name (DNS label): what a policy's ``llm.advisor`` may contain.
ADVISOR_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class AdvisorEndpoint(BaseModel):
    """One OpenAI-compatible chat endpoint offered to policies under ``name``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=ADVISOR_NAME, description="what a policy's llm.advisor names")
    base_url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2048, description="OpenAI-compatible /v1 URL")
    model: str = Field(min_length=1, max_length=256, description="model name the endpoint serves")
    api_key_file: Path | None = Field(default=None, description="mounted Secret file holding the API key")
    api_key_env: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="environment variable of the operator process holding the API key (local runs)",
    )

    def describe(self) -> str:
        """Name, model and endpoint: safe to show (no key, no key path, no ``user:password@`` of the URL)."""
        return f"{self.name} ({self.model} at {strip_userinfo(self.base_url)})"

    def api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The API key from the mounted file (preferred) or the environment variable; None if neither."""
        if self.api_key_file is not None:
            try:
                key = self.api_key_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise InvalidInput(
                    f"cannot read the API key of advisor {self.name!r}: {exc.strerror or exc}",
                    source="environment",
                    field=ADVISORS_ENV,
                ) from exc
            if key:
                return key
        if self.api_key_env:
            env = os.environ if environ is None else environ
            return env.get(self.api_key_env) or None
        return None


def advisor_endpoints_from_env(env: Mapping[str, str]) -> tuple[AdvisorEndpoint, ...]:
    """The admin's advisors from ``SHIFTLIGHT_LLM_ADVISORS`` (empty when unset). Errors name the entry and field."""
    raw = env.get(ADVISORS_ENV, "").strip()
    if not raw:
        return ()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not JSON: {exc}", source="environment", field=ADVISORS_ENV) from None
    if not isinstance(data, list):
        raise InvalidInput("must be a JSON list of advisors", source="environment", field=ADVISORS_ENV)
    out: list[AdvisorEndpoint] = []
    for i, item in enumerate(data):
        try:
            out.append(AdvisorEndpoint.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidInput(
                first["msg"], source="environment", field=f"{ADVISORS_ENV}[{i}]{'.' + where if where else ''}"
            ) from None
    names = [a.name for a in out]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidInput(
            f"advisor names must be unique, repeated: {duplicates}", source="environment", field=ADVISORS_ENV
        )
    return tuple(out)


__all__ = ["ADVISORS_ENV", "ADVISOR_NAME", "AdvisorEndpoint", "advisor_endpoints_from_env"]
