"""How to reach Prometheus and how to read a target's series: :class:`PrometheusSettings` (``from_env`` reads
``SHIFTLIGHT_PROMETHEUS_*``; a bearer token may live in a Secret-mounted file, re-read every cycle so rotation needs
no restart)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from controller.observe import promql

ENV_PREFIX = "SHIFTLIGHT_PROMETHEUS_"
#: The variables ``from_env`` reads (after the prefix), and the field each sets (``INSECURE_SKIP_VERIFY`` sets
#: ``verify_tls``, negated).
ENV_FIELDS = {
    "URL": "url",
    "TIMEOUT_SECONDS": "timeout_s",
    "TOKEN_FILE": "bearer_token_file",
    "CA_FILE": "ca_file",
    "VARIANT_LABEL": "variant_label",
    "DEFAULT_VARIANT": "default_variant",
}


class PrometheusSettings(BaseModel):
    """How to reach Prometheus and how to read the target's series."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = Field(default="http://127.0.0.1:9090", pattern=r"^https?://")
    bearer_token: SecretStr | None = None
    bearer_token_file: Path | None = Field(default=None, description="Secret-mounted token, re-read every cycle")
    headers: dict[str, str] = Field(default_factory=dict, description="extra HTTP headers (e.g. X-Scope-OrgID)")
    verify_tls: bool = True
    ca_file: Path | None = None
    timeout_s: float = Field(
        default=10.0, gt=0, le=30, description="total deadline of one query (connect, headers, body), retries included"
    )
    max_answer_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024, description="the longest answer read, in bytes"
    )
    max_series: int = Field(default=20_000, ge=1, description="the most series one answer may hold")
    max_samples: int = Field(default=500_000, ge=1, description="the most samples one range answer may hold")
    retries: int = Field(default=0, ge=0, le=5, description="transport retries on 502/503/504 and connect errors")
    variant_label: str = Field(default=promql.DEFAULT_VARIANT_LABEL, pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    default_variant: str | None = Field(
        default=None, description="variant for series without the variant label; None makes them an error"
    )
    namespace_label: str = Field(default="namespace", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    model_label: str = Field(default="model_name", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    match_namespace: bool = Field(default=True, description="add the target's namespace to the selector")
    extra_labels: dict[str, str] = Field(default_factory=dict, description="deployment labels every series carries")
    max_staleness_s: float = Field(default=120.0, gt=0, description="newest sample may be at most this old")
    min_requests: float = Field(default=1.0, ge=0, description="fewer finished requests: the shape is undefined")
    repetitiveness_from_spec: bool = Field(
        default=False,
        description="with a lookup (ngram) drafter, estimate repetitiveness as accepted draft tokens / output tokens",
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PrometheusSettings:
        """Settings from ``SHIFTLIGHT_PROMETHEUS_{URL,TIMEOUT_SECONDS,TOKEN_FILE,CA_FILE,INSECURE_SKIP_VERIFY,
        VARIANT_LABEL,DEFAULT_VARIANT}``: the names the operator reads (a token only ever from a file). Errors name
        the variable."""
        env = os.environ if env is None else env
        raw: dict[str, Any] = {}
        for suffix, name in ENV_FIELDS.items():
            if (value := env.get(ENV_PREFIX + suffix)) is not None:
                raw[name] = value
        if (value := env.get(ENV_PREFIX + "INSECURE_SKIP_VERIFY")) is not None:
            raw["verify_tls"] = value.strip().lower() not in {"1", "true", "yes"}
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = str(first["loc"][0]) if first["loc"] else "url"
            suffix = {v: k for k, v in ENV_FIELDS.items()}.get(field, "INSECURE_SKIP_VERIFY")
            raise InvalidInput(first["msg"], source="environment", field=ENV_PREFIX + suffix) from exc

    def fleet_selector(self) -> promql.Selector:
        """Every model's series (restricted only by ``extra_labels``), aggregated per model and namespace."""
        group = (self.model_label, self.namespace_label) if self.match_namespace else (self.model_label,)
        return promql.Selector(
            model_name=None,
            labels=tuple(sorted(self.extra_labels.items())),
            model_label=self.model_label,
            namespace_label=self.namespace_label,
            group_by=group,
        )

    def selector(self, target: TargetRef) -> promql.Selector:
        return promql.Selector(
            model_name=target.model,
            namespace=target.namespace if self.match_namespace else None,
            labels=tuple(sorted(self.extra_labels.items())),
            model_label=self.model_label,
            namespace_label=self.namespace_label,
        )


__all__ = ["ENV_PREFIX", "PrometheusSettings"]
