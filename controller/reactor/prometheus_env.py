"""The operator's Prometheus settings from the environment the chart sets: the bearer token file, the CA bundle,
TLS verification and the variant labels (``SHIFTLIGHT_PROMETHEUS_*``). Admin settings only: a TunedService names
no URL, path or credential. Every error names the variable of the value refused."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from controller.errors import InvalidInput
from controller.observe.prometheus import PrometheusSettings

#: The environment variable of each field of :class:`PrometheusSettings` the operator sets.
PROMETHEUS_ENV = {
    "url": "SHIFTLIGHT_PROMETHEUS_URL",
    "timeout_s": "SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS",
    "bearer_token_file": "SHIFTLIGHT_PROMETHEUS_TOKEN_FILE",
    "ca_file": "SHIFTLIGHT_PROMETHEUS_CA_FILE",
    "verify_tls": "SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY",
    "variant_label": "SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL",
    "default_variant": "SHIFTLIGHT_PROMETHEUS_DEFAULT_VARIANT",
}
TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")


def env_path(env: Mapping[str, str], name: str) -> Path | None:
    raw = (env.get(name) or "").strip()
    return Path(raw) if raw else None


def env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw not in TRUE + FALSE:
        raise InvalidInput(f"must be true or false, got {env.get(name)!r}", source="environment", field=name)
    return raw in TRUE


def prometheus_access(env: Mapping[str, str], *, via_grafana: bool) -> dict[str, Any]:
    """The ``OperatorSettings`` fields of the token file, TLS and variant labels of the metrics source (either way
    in; ``via_grafana``: metrics come through Grafana's datasource proxy, which sends Grafana's token)."""
    token_file = env_path(env, "SHIFTLIGHT_PROMETHEUS_TOKEN_FILE")
    ca_file = env_path(env, "SHIFTLIGHT_PROMETHEUS_CA_FILE")
    insecure = env_flag(env, "SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY", False)
    if token_file is not None and via_grafana:
        raise InvalidInput(
            "metrics come through Grafana's datasource proxy, which authenticates with Grafana's token "
            "(SHIFTLIGHT_GRAFANA_TOKEN_FILE); a Prometheus token would never be sent",
            source="environment",
            field="SHIFTLIGHT_PROMETHEUS_TOKEN_FILE",
        )
    if ca_file is not None and insecure:
        raise InvalidInput(
            "set either a CA file (SHIFTLIGHT_PROMETHEUS_CA_FILE) or no verification, not both",
            source="environment",
            field="SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY",
        )
    return {
        "prometheus_token_file": token_file,
        "prometheus_ca_file": ca_file,
        "prometheus_verify_tls": not insecure,
        "prometheus_variant_label": (env.get("SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL") or "").strip() or "variant",
        "prometheus_default_variant": (env.get("SHIFTLIGHT_PROMETHEUS_DEFAULT_VARIANT") or "").strip() or None,
    }


def validated(fields: Mapping[str, object]) -> PrometheusSettings:
    """``PrometheusSettings`` of these fields; an error names the environment variable of the field refused."""
    try:
        return PrometheusSettings.model_validate(dict(fields))
    except ValidationError as exc:
        first = exc.errors()[0]
        name = PROMETHEUS_ENV.get(str(first["loc"][0]) if first["loc"] else "", "SHIFTLIGHT_PROMETHEUS_URL")
        raise InvalidInput(f"{first['msg']}, got {first['input']!r}", source="environment", field=name) from None


__all__ = ["PROMETHEUS_ENV", "env_flag", "env_path", "prometheus_access", "validated"]
