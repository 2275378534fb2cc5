"""Operator settings, grouped (kopf ``OperatorSettings`` style) and read from the environment the chart sets."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
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
        e = dict(os.environ if env is None else env)

        def num(name: str, default: float) -> float:
            raw = e.get(name)
            if raw in (None, ""):
                return default
            try:
                return float(raw)
            except ValueError:
                raise InvalidInput(f"must be a number, got {raw!r}", source="environment", field=name) from None

        def port(name: str, default: int | None) -> int | None:
            raw = e.get(name)
            if raw in (None, ""):
                return default
            value = int(num(name, 0))
            return value or None

        backend = e.get("SHIFTLIGHT_BACKEND", "simulator")
        if backend not in ("simulator", "kubernetes"):
            raise InvalidInput(
                f"must be 'simulator' or 'kubernetes', got {backend!r}",
                source="environment",
                field="SHIFTLIGHT_BACKEND",
            )

        def choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
            value = (e.get(name) or default).lower()
            if value not in allowed:
                raise InvalidInput(
                    f"must be one of {', '.join(allowed)}, got {e.get(name)!r}", source="environment", field=name
                )
            return value

        def from_json(name: str, default: str, adapter: TypeAdapter[object]) -> object:
            raw = e.get(name) or default
            try:
                return adapter.validate_json(raw)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors()
                )
                raise InvalidInput(f"invalid: {problems}", source="environment", field=name) from None

        def time_scale() -> float:
            name = "SHIFTLIGHT_TIME_SCALE"
            value = num(name, 1.0)
            if not 0 < value <= 100_000:
                raise InvalidInput(
                    f"must be in (0, 100000] simulated seconds per real second, got {e.get(name)!r}",
                    source="environment",
                    field=name,
                )
            return value

        def digest_hour() -> int | None:
            raw = e.get("SHIFTLIGHT_SLACK_DIGEST_HOUR")
            if raw in (None, ""):
                return 9
            if raw.strip().lower() in ("none", "off"):
                return None
            hour = num("SHIFTLIGHT_SLACK_DIGEST_HOUR", 9)
            if hour != int(hour) or not 0 <= hour <= 23:
                raise InvalidInput(
                    f"must be an hour 0-23 (or 'none'), got {raw!r}",
                    source="environment",
                    field="SHIFTLIGHT_SLACK_DIGEST_HOUR",
                )
            return int(hour)

        def positive(name: str, default: float) -> float:
            value = num(name, default)
            if not 0 < value <= 300:
                raise InvalidInput(
                    f"must be in (0, 300] seconds, got {e.get(name)!r}", source="environment", field=name
                )
            return value

        def price(name: str) -> float | None:
            raw = e.get(name)
            if raw is None or not raw.strip():
                return None
            value = num(name, 0.0)
            if not math.isfinite(value) or value < 0:
                raise InvalidInput(f"must be a price in USD >= 0, got {raw!r}", source="environment", field=name)
            return value

        def combinations() -> int:
            name = "SHIFTLIGHT_MAX_SPACE_COMBINATIONS"
            value = num(name, MAX_SPACE_COMBINATIONS)
            if value != int(value) or not 1 <= value <= MAX_SPACE_COMBINATIONS:
                raise InvalidInput(
                    f"must be a whole number from 1 to {MAX_SPACE_COMBINATIONS}, got {e.get(name)!r}",
                    source="environment",
                    field=name,
                )
            return int(value)

        def policy_bytes() -> int:
            name = "SHIFTLIGHT_POLICY_MAX_BYTES"
            value = num(name, MAX_POLICY_BYTES)
            if value != int(value) or not 1024 <= value <= 1024 * 1024:
                raise InvalidInput(
                    f"must be a whole number of bytes from 1024 to 1048576, got {e.get(name)!r}",
                    source="environment",
                    field=name,
                )
            return int(value)

        def grafana() -> GrafanaSettings | None:
            names = ("URL", "TOKEN_FILE", "DATASOURCE_UID", "ANNOTATIONS", "DASHBOARD_UIDS")
            raw = {n: (e.get(f"SHIFTLIGHT_GRAFANA_{n}") or "").strip() for n in names}
            if not any(raw.values()):
                return None
            for needed, why in (("URL", "Grafana's URL"), ("TOKEN_FILE", "the service-account token file")):
                if not raw[needed]:
                    given = ", ".join(f"SHIFTLIGHT_GRAFANA_{n}" for n in names if raw[n])
                    raise InvalidInput(
                        f"{why} is required when {given} is set",
                        source="environment",
                        field=f"SHIFTLIGHT_GRAFANA_{needed}",
                    )
            if raw["DATASOURCE_UID"] and (e.get("SHIFTLIGHT_PROMETHEUS_URL") or "").strip():
                raise InvalidInput(
                    "metrics come from exactly one place: set either SHIFTLIGHT_PROMETHEUS_URL (prometheus.url) or "
                    "SHIFTLIGHT_GRAFANA_URL with SHIFTLIGHT_GRAFANA_DATASOURCE_UID (grafana.url, "
                    "grafana.datasourceUid), not both",
                    source="environment",
                    field="SHIFTLIGHT_PROMETHEUS_URL",
                )
            annotations = raw["ANNOTATIONS"].lower()
            if annotations not in ("", "true", "false", "1", "0", "yes", "no"):
                raise InvalidInput(
                    f"must be true or false, got {annotations!r}",
                    source="environment",
                    field="SHIFTLIGHT_GRAFANA_ANNOTATIONS",
                )
            fields = {
                "url": raw["URL"],
                "token_file": raw["TOKEN_FILE"],
                "datasource_uid": raw["DATASOURCE_UID"] or None,
                "annotations": annotations in ("true", "1", "yes"),
                "dashboard_uids": tuple(u.strip() for u in raw["DASHBOARD_UIDS"].split(",") if u.strip()),
            }
            env_names = {"url": "URL", "token_file": "TOKEN_FILE", "datasource_uid": "DATASOURCE_UID"}
            try:
                return GrafanaSettings.model_validate(fields)
            except ValidationError as exc:
                first = exc.errors()[0]
                name = env_names.get(str(first["loc"][0]), "DASHBOARD_UIDS")
                raise InvalidInput(first["msg"], source="environment", field=f"SHIFTLIGHT_GRAFANA_{name}") from None

        grafana_settings = grafana()
        prometheus_url = e.get("SHIFTLIGHT_PROMETHEUS_URL") or "http://127.0.0.1:9090"
        via_grafana = grafana_settings is not None and grafana_settings.datasource_uid is not None
        if grafana_settings is not None and via_grafana:
            prometheus_url = grafana_settings.proxy_url()
        selector = from_json("SHIFTLIGHT_CANARY_NODE_SELECTOR", "{}", _NODE_SELECTOR)  # type: ignore[arg-type]
        tolerations = from_json("SHIFTLIGHT_CANARY_TOLERATIONS", "[]", _TOLERATIONS)  # type: ignore[arg-type]
        leader = LeaderSettings(
            enabled=e.get("SHIFTLIGHT_LEADER_ELECTION", "true").lower() not in ("0", "false", "no"),
            lease_name=e.get("SHIFTLIGHT_LEASE_NAME", "shiftlight-leader"),
            lease_namespace=e.get("SHIFTLIGHT_LEASE_NAMESPACE") or e.get("POD_NAMESPACE") or "default",
            identity=e.get("POD_NAME") or socket.gethostname(),
            lease_duration_s=num("SHIFTLIGHT_LEASE_DURATION_SECONDS", 15.0),
            renew_deadline_s=num("SHIFTLIGHT_LEASE_RENEW_DEADLINE_SECONDS", 10.0),
            retry_period_s=num("SHIFTLIGHT_LEASE_RETRY_PERIOD_SECONDS", 2.0),
        )
        settings = cls(
            backend=backend,  # type: ignore[arg-type]
            connection=ConnectionSettings(kubeconfig=e.get("KUBECONFIG") or None, context=e.get("SHIFTLIGHT_CONTEXT")),
            leader=leader,
            loop=LoopSettings(time_scale=time_scale()),
            simulator=SimulatorSettings(calibration_file=env_path(e, "SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE")),
            policy_dir=Path(e.get("SHIFTLIGHT_POLICY_DIR", "policies/v1")),
            prometheus_url=prometheus_url,
            health_port=port("SHIFTLIGHT_HEALTH_PORT", 8080),
            metrics_port=port("SHIFTLIGHT_METRICS_PORT", 9090),
            canary_node_selector=dict(selector),  # type: ignore[call-overload]
            canary_tolerations=tolerations,  # type: ignore[arg-type]
            prometheus_timeout_s=positive("SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS", 10.0),
            trial_progress_interval_s=positive("SHIFTLIGHT_TRIAL_PROGRESS_INTERVAL_SECONDS", 5.0),
            trial_cache_max_entries=max(1, int(num("SHIFTLIGHT_TRIAL_CACHE_MAX_ENTRIES", 200))),
            trial_cache_key_file=Path(e["SHIFTLIGHT_TRIAL_CACHE_KEY_FILE"])
            if e.get("SHIFTLIGHT_TRIAL_CACHE_KEY_FILE")
            else None,
            log_level=choice("SHIFTLIGHT_LOG_LEVEL", "info", LOG_LEVELS),
            log_format=choice("SHIFTLIGHT_LOG_FORMAT", "text", ("text", "json")),  # type: ignore[arg-type]
            slack_digest_hour=digest_hour(),
            slack_webhook_file=Path(e["SHIFTLIGHT_SLACK_WEBHOOK_FILE"])
            if e.get("SHIFTLIGHT_SLACK_WEBHOOK_FILE")
            else None,
            slack_channel=e.get("SHIFTLIGHT_SLACK_CHANNEL", ""),
            gpu_hour_usd=price("SHIFTLIGHT_GPU_HOUR_USD"),
            api_input_usd_per_million=price("SHIFTLIGHT_API_INPUT_USD_PER_MILLION") or 0.0,
            api_output_usd_per_million=price("SHIFTLIGHT_API_OUTPUT_USD_PER_MILLION") or 0.0,
            max_space_combinations=combinations(),
            policy_max_bytes=policy_bytes(),
            verify_approvals=e.get("SHIFTLIGHT_VERIFY_APPROVALS", "true").lower() not in ("0", "false", "no"),
            llm_advisors=advisor_endpoints_from_env(e),
            grafana=grafana_settings,
            **prometheus_access(e, via_grafana=via_grafana),
        )
        settings.prometheus_settings()  # a label or variant Prometheus settings refuse: refused at start
        if overrides:
            from dataclasses import replace

            settings = replace(settings, **overrides)  # type: ignore[arg-type]
        return settings
