"""Operator settings, grouped (kopf ``OperatorSettings`` style) and read from the environment the chart sets."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter, ValidationError

from controller.adapters.kube.lease import LeaderSettings
from controller.advisor.endpoints import AdvisorEndpoint, advisor_endpoints_from_env
from controller.crd.models import Toleration
from controller.domain.slo import SLO
from controller.errors import InvalidInput
from controller.observe.grafana_proxy import GrafanaSettings, metrics_source
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.policy.loading import MAX_POLICY_BYTES
from controller.policy.space import MAX_SPACE_COMBINATIONS
from controller.reactor.prometheus_env import env_path, prometheus_access, validated

Backend = Literal["simulator", "kubernetes"]
LogFormat = Literal["text", "json"]
LOG_LEVELS = ("debug", "info", "warning", "error")
_TOLERATIONS = TypeAdapter(tuple[Toleration, ...])
_NODE_SELECTOR = TypeAdapter(dict[str, str])


@dataclass(frozen=True)
class ConnectionSettings:
    """How the operator reaches the API server: in-cluster by default, else a kubeconfig."""

    kubeconfig: str | None = None
    context: str | None = None


@dataclass(frozen=True)
class LoopSettings:
    """The per-TunedService control loop."""

    time_scale: float = 1.0
    """Simulated seconds per real second between cycles (simulator backend); 1.0 is real time."""
    min_sleep_s: float = 0.02
    max_requeue_s: float = 600.0
    idle_s: float = 1.0
    """Sleep of a non-leader (or paused) loop before it looks again."""
    status_retries: int = 5
    """Attempts of the guarded status write when someone else wrote in between (409/422)."""


@dataclass(frozen=True)
class SimulatorSettings:
    """Defaults of the in-process simulated fleet behind a TunedService (``backend=simulator``)."""

    traffic_profile: str = "coding-agents"
    seed: int = 7
    cold_start_s: float = 180.0
    calibration_file: Path | None = None
    """A calibration profile (``shiftlight calibrate``'s ``calibration-<gpu>.yaml``, a mounted ConfigMap key;
    ``SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE``): fleets and trials on its GPU run on its measured curves."""


@dataclass(frozen=True)
class OperatorSettings:
    backend: Backend = "simulator"
    all_namespaces: bool = True
    namespaces: tuple[str, ...] = ()
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    leader: LeaderSettings = field(default_factory=LeaderSettings)
    loop: LoopSettings = field(default_factory=LoopSettings)
    simulator: SimulatorSettings = field(default_factory=SimulatorSettings)
    policy_dir: Path = Path("policies/v1")
    default_policy: str = "default"
    prometheus_url: str = "http://127.0.0.1:9090"
    health_port: int | None = 8080
    metrics_port: int | None = 9090
    metrics_host: str = "0.0.0.0"
    canary_node_selector: Mapping[str, str] = field(default_factory=dict)
    """Node selector of canary trial Pods when a TunedService's ``spec.canaryPool`` sets none."""
    canary_tolerations: tuple[Toleration, ...] = ()
    """Tolerations of canary trial Pods when a TunedService's ``spec.canaryPool`` sets none."""
    prometheus_timeout_s: float = 10.0
    """Seconds before a Prometheus query counts as failed."""
    prometheus_token_file: Path | None = None
    """A mounted Secret key holding the bearer token sent to Prometheus, re-read every query
    (``SHIFTLIGHT_PROMETHEUS_TOKEN_FILE``)."""
    prometheus_ca_file: Path | None = None
    """A mounted CA bundle that verifies the metrics source's TLS certificate (``SHIFTLIGHT_PROMETHEUS_CA_FILE``)."""
    prometheus_verify_tls: bool = True
    """False: the metrics source's TLS certificate is not verified (``SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY``)."""
    prometheus_variant_label: str = "variant"
    """The series label naming the variant, stable or candidate (``SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL``)."""
    prometheus_default_variant: str | None = None
    """The variant of series without the variant label; None makes them an error
    (``SHIFTLIGHT_PROMETHEUS_DEFAULT_VARIANT``)."""
    log_level: str = "info"
    log_format: LogFormat = "text"
    """``text`` (human-readable lines) or ``json`` (one JSON object per line)."""
    slack_digest_hour: int | None = 9
    """UTC hour of the daily digest for TunedServices whose spec sets no Slack settings (None: no digest)."""
    mirror_crs: bool = True
    """Create Trial and ConfigRollout CRs that mirror the status (for kubectl visibility)."""
    trial_progress_interval_s: float = 5.0
    """The least time between two progress patches of a running trial's Trial CR (``kubernetes`` backend;
    ``SHIFTLIGHT_TRIAL_PROGRESS_INTERVAL_SECONDS``)."""
    trial_cache_max_entries: int = 200
    """Trial results kept per TunedService in its cache ConfigMap (the oldest go first; also bounded in bytes;
    ``SHIFTLIGHT_TRIAL_CACHE_MAX_ENTRIES``)."""
    trial_cache_key_file: Path | None = None
    """A mounted Secret key holding the key that signs trial cache entries (``SHIFTLIGHT_TRIAL_CACHE_KEY_FILE``; at
    least 32 bytes). None: a random key per operator process (cached results do not outlive it)."""
    max_space_combinations: int = MAX_SPACE_COMBINATIONS
    """The budget of one TunedService: the most raw combinations its policy's space may have
    (``SHIFTLIGHT_MAX_SPACE_COMBINATIONS``, 1 to the hard limit of 100,000). A policy over it is refused
    (``Accepted=False``, field ``space``) before anything is built for it."""
    policy_max_bytes: int = MAX_POLICY_BYTES
    """The most bytes of a tenant's policy text (a ConfigMap key) read (``SHIFTLIGHT_POLICY_MAX_BYTES``, 1 KiB to a
    ConfigMap's 1 MiB). A longer text is refused (``Accepted=False``) before it is parsed."""
    verify_approvals: bool = True
    """Honour approvals only from users allowed to ``approve`` configrollouts (SubjectAccessReview)."""
    gpu_hour_usd: float | None = None
    """What one GPU-hour costs, in USD (``SHIFTLIGHT_GPU_HOUR_USD``; chart ``cost.gpuHourUsd``): decisions show
    their cost at this price and the daily digest prices the schedule with it. None: the list price of the GPU
    profile matching a TunedService's ``spec.gpuType``, where one does."""
    api_input_usd_per_million: float = 0.0
    """The API price per million input tokens the daily digest compares self-hosting against
    (``SHIFTLIGHT_API_INPUT_USD_PER_MILLION``)."""
    api_output_usd_per_million: float = 0.0
    """The same per million output tokens (``SHIFTLIGHT_API_OUTPUT_USD_PER_MILLION``)."""
    slack_webhook_file: Path | None = None
    """A mounted Secret key holding the Slack incoming-webhook URL (never the URL itself)."""
    slack_channel: str = ""
    llm_advisors: tuple[AdvisorEndpoint, ...] = ()
    """The LLM advisors a policy may name (``llm.advisor``): endpoint, model and key file are admin settings."""
    grafana: GrafanaSettings | None = None
    """Grafana: the metrics source (its datasource proxy, when a datasource UID is set; ``prometheus_url`` is then
    the proxy's URL) and/or where decisions are annotated. Its token is a mounted Secret file."""

    def prometheus_settings(self) -> PrometheusSettings:
        """How the metrics source is read: URL, timeout, bearer token file, TLS and the variant labels. Errors name
        the environment variable of the value refused."""
        fields: dict[str, object] = {
            "url": self.prometheus_url,
            "timeout_s": self.prometheus_timeout_s,
            "bearer_token_file": self.prometheus_token_file,
            "ca_file": self.prometheus_ca_file,
            "verify_tls": self.prometheus_verify_tls,
            "variant_label": self.prometheus_variant_label,
            "default_variant": self.prometheus_default_variant,
        }
        return validated(fields)

    def metrics_source(self, prometheus: PrometheusSettings, *, slo: SLO | None = None) -> PrometheusMetrics:
        """The MetricsSource these settings choose: Prometheus, or Prometheus through Grafana's datasource proxy
        (``prometheus`` gives the timeout and label settings either way)."""
        return metrics_source(prometheus, self.grafana, slo=slo)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> OperatorSettings:
        """Settings from ``SHIFTLIGHT_*`` variables (as the Helm chart sets them), then explicit overrides."""
        e = _Env(dict(os.environ if env is None else env))
        backend = _backend(e)
        grafana_settings = _grafana(e)
        via_grafana = grafana_settings is not None and grafana_settings.datasource_uid is not None
        prometheus_url = e.get("SHIFTLIGHT_PROMETHEUS_URL") or "http://127.0.0.1:9090"
        if grafana_settings is not None and via_grafana:
            prometheus_url = grafana_settings.proxy_url()
        selector = e.from_json("SHIFTLIGHT_CANARY_NODE_SELECTOR", "{}", _NODE_SELECTOR)  # type: ignore[arg-type]
        tolerations = e.from_json("SHIFTLIGHT_CANARY_TOLERATIONS", "[]", _TOLERATIONS)  # type: ignore[arg-type]
        leader = _leader(e)
        settings = cls(
            backend=backend,
            connection=ConnectionSettings(kubeconfig=e.get("KUBECONFIG") or None, context=e.get("SHIFTLIGHT_CONTEXT")),
            leader=leader,
            loop=LoopSettings(time_scale=e.time_scale()),
            simulator=SimulatorSettings(calibration_file=env_path(e.values, "SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE")),
            policy_dir=Path(e.text("SHIFTLIGHT_POLICY_DIR", "policies/v1")),
            prometheus_url=prometheus_url,
            health_port=e.port("SHIFTLIGHT_HEALTH_PORT", 8080),
            metrics_port=e.port("SHIFTLIGHT_METRICS_PORT", 9090),
            canary_node_selector=dict(selector),  # type: ignore[call-overload]
            canary_tolerations=tolerations,  # type: ignore[arg-type]
            prometheus_timeout_s=e.positive("SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS", 10.0),
            trial_progress_interval_s=e.positive("SHIFTLIGHT_TRIAL_PROGRESS_INTERVAL_SECONDS", 5.0),
            trial_cache_max_entries=max(1, int(e.num("SHIFTLIGHT_TRIAL_CACHE_MAX_ENTRIES", 200))),
            trial_cache_key_file=e.path("SHIFTLIGHT_TRIAL_CACHE_KEY_FILE"),
            log_level=e.choice("SHIFTLIGHT_LOG_LEVEL", "info", LOG_LEVELS),
            log_format=e.choice("SHIFTLIGHT_LOG_FORMAT", "text", ("text", "json")),  # type: ignore[arg-type]
            slack_digest_hour=e.digest_hour(),
            slack_webhook_file=e.path("SHIFTLIGHT_SLACK_WEBHOOK_FILE"),
            slack_channel=e.text("SHIFTLIGHT_SLACK_CHANNEL", ""),
            gpu_hour_usd=e.price("SHIFTLIGHT_GPU_HOUR_USD"),
            api_input_usd_per_million=e.price("SHIFTLIGHT_API_INPUT_USD_PER_MILLION") or 0.0,
            api_output_usd_per_million=e.price("SHIFTLIGHT_API_OUTPUT_USD_PER_MILLION") or 0.0,
            max_space_combinations=e.whole(
                "SHIFTLIGHT_MAX_SPACE_COMBINATIONS", 1, MAX_SPACE_COMBINATIONS, MAX_SPACE_COMBINATIONS, "a whole number"
            ),
            policy_max_bytes=e.whole(
                "SHIFTLIGHT_POLICY_MAX_BYTES", 1024, 1024 * 1024, MAX_POLICY_BYTES, "a whole number of bytes"
            ),
            verify_approvals=e.flag("SHIFTLIGHT_VERIFY_APPROVALS"),
            llm_advisors=advisor_endpoints_from_env(e.values),
            grafana=grafana_settings,
            **prometheus_access(e.values, via_grafana=via_grafana),
        )
        settings.prometheus_settings()  # a label or variant Prometheus settings refuse: refused at start
        if overrides:
            settings = replace(settings, **overrides)  # type: ignore[arg-type]
        return settings


_GRAFANA_VARS = ("URL", "TOKEN_FILE", "DATASOURCE_UID", "ANNOTATIONS", "DASHBOARD_UIDS")
_GRAFANA_FIELD_VARS = {"url": "URL", "token_file": "TOKEN_FILE", "datasource_uid": "DATASOURCE_UID"}
_BACKENDS: dict[str, Backend] = {"simulator": "simulator", "kubernetes": "kubernetes"}
_TRUTHY = ("true", "1", "yes")
_BOOLEANS = ("", "true", "false", "1", "0", "yes", "no")


def _refused(message: str, name: str) -> InvalidInput:
    return InvalidInput(message, source="environment", field=name)


@dataclass(frozen=True)
class _Env:
    """The environment variables, read as typed values; a value refused names its variable."""

    values: dict[str, str]

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def text(self, name: str, default: str) -> str:
        return self.values.get(name, default)

    def num(self, name: str, default: float) -> float:
        raw = self.values.get(name)
        if raw in (None, ""):
            return default
        try:
            return float(raw)
        except ValueError:
            raise _refused(f"must be a number, got {raw!r}", name) from None

    def port(self, name: str, default: int | None) -> int | None:
        if self.values.get(name) in (None, ""):
            return default
        return int(self.num(name, 0)) or None

    def path(self, name: str) -> Path | None:
        return Path(self.values[name]) if self.values.get(name) else None

    def flag(self, name: str) -> bool:
        """A switch that is on unless set to 0, false or no."""
        return self.values.get(name, "true").lower() not in ("0", "false", "no")

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        value = (self.values.get(name) or default).lower()
        if value not in allowed:
            raise _refused(f"must be one of {', '.join(allowed)}, got {self.values.get(name)!r}", name)
        return value

    def from_json(self, name: str, default: str, adapter: TypeAdapter[object]) -> object:
        raw = self.values.get(name) or default
        try:
            return adapter.validate_json(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors()
            )
            raise _refused(f"invalid: {problems}", name) from None

    def time_scale(self) -> float:
        name = "SHIFTLIGHT_TIME_SCALE"
        value = self.num(name, 1.0)
        if not 0 < value <= 100_000:
            raise _refused(
                f"must be in (0, 100000] simulated seconds per real second, got {self.values.get(name)!r}", name
            )
        return value

    def digest_hour(self) -> int | None:
        name = "SHIFTLIGHT_SLACK_DIGEST_HOUR"
        raw = self.values.get(name)
        if raw in (None, ""):
            return 9
        if raw.strip().lower() in ("none", "off"):
            return None
        hour = self.num(name, 9)
        if hour != int(hour) or not 0 <= hour <= 23:
            raise _refused(f"must be an hour 0-23 (or 'none'), got {raw!r}", name)
        return int(hour)

    def positive(self, name: str, default: float) -> float:
        value = self.num(name, default)
        if not 0 < value <= 300:
            raise _refused(f"must be in (0, 300] seconds, got {self.values.get(name)!r}", name)
        return value

    def price(self, name: str) -> float | None:
        raw = self.values.get(name)
        if raw is None or not raw.strip():
            return None
        value = self.num(name, 0.0)
        if not math.isfinite(value) or value < 0:
            raise _refused(f"must be a price in USD >= 0, got {raw!r}", name)
        return value

    def whole(self, name: str, low: int, high: int, default: int, what: str) -> int:
        """A whole number from ``low`` to ``high`` (``what`` names it in the refusal)."""
        value = self.num(name, default)
        if value != int(value) or not low <= value <= high:
            raise _refused(f"must be {what} from {low} to {high}, got {self.values.get(name)!r}", name)
        return int(value)


def _backend(e: _Env) -> Backend:
    backend = e.text("SHIFTLIGHT_BACKEND", "simulator")
    if backend in _BACKENDS:
        return _BACKENDS[backend]
    raise _refused(f"must be 'simulator' or 'kubernetes', got {backend!r}", "SHIFTLIGHT_BACKEND")


def _leader(e: _Env) -> LeaderSettings:
    return LeaderSettings(
        enabled=e.flag("SHIFTLIGHT_LEADER_ELECTION"),
        lease_name=e.text("SHIFTLIGHT_LEASE_NAME", "shiftlight-leader"),
        lease_namespace=e.get("SHIFTLIGHT_LEASE_NAMESPACE") or e.get("POD_NAMESPACE") or "default",
        identity=e.get("POD_NAME") or socket.gethostname(),
        lease_duration_s=e.num("SHIFTLIGHT_LEASE_DURATION_SECONDS", 15.0),
        renew_deadline_s=e.num("SHIFTLIGHT_LEASE_RENEW_DEADLINE_SECONDS", 10.0),
        retry_period_s=e.num("SHIFTLIGHT_LEASE_RETRY_PERIOD_SECONDS", 2.0),
    )


def _grafana(e: _Env) -> GrafanaSettings | None:
    """Grafana's settings (``SHIFTLIGHT_GRAFANA_*``), None when none is set."""
    raw = {n: (e.get(f"SHIFTLIGHT_GRAFANA_{n}") or "").strip() for n in _GRAFANA_VARS}
    if not any(raw.values()):
        return None
    _check_grafana(e, raw)
    annotations = raw["ANNOTATIONS"].lower()
    if annotations not in _BOOLEANS:
        raise _refused(f"must be true or false, got {annotations!r}", "SHIFTLIGHT_GRAFANA_ANNOTATIONS")
    fields = {
        "url": raw["URL"],
        "token_file": raw["TOKEN_FILE"],
        "datasource_uid": raw["DATASOURCE_UID"] or None,
        "annotations": annotations in _TRUTHY,
        "dashboard_uids": tuple(u.strip() for u in raw["DASHBOARD_UIDS"].split(",") if u.strip()),
    }
    try:
        return GrafanaSettings.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = _GRAFANA_FIELD_VARS.get(str(first["loc"][0]), "DASHBOARD_UIDS")
        raise _refused(first["msg"], f"SHIFTLIGHT_GRAFANA_{name}") from None


def _check_grafana(e: _Env, raw: Mapping[str, str]) -> None:
    """Grafana's URL and token file are required, and its datasource excludes a Prometheus URL."""
    for needed, why in (("URL", "Grafana's URL"), ("TOKEN_FILE", "the service-account token file")):
        if not raw[needed]:
            given = ", ".join(f"SHIFTLIGHT_GRAFANA_{n}" for n in _GRAFANA_VARS if raw[n])
            raise _refused(f"{why} is required when {given} is set", f"SHIFTLIGHT_GRAFANA_{needed}")
    if raw["DATASOURCE_UID"] and (e.get("SHIFTLIGHT_PROMETHEUS_URL") or "").strip():
        raise _refused(
            "metrics come from exactly one place: set either SHIFTLIGHT_PROMETHEUS_URL (prometheus.url) or "
            "SHIFTLIGHT_GRAFANA_URL with SHIFTLIGHT_GRAFANA_DATASOURCE_UID (grafana.url, "
            "grafana.datasourceUid), not both",
            "SHIFTLIGHT_PROMETHEUS_URL",
        )
