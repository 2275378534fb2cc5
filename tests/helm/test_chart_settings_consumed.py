"""Every environment variable and mounted file the chart gives the operator is consumed by ``controller/``.

The chart is rendered with every optional feature on (``values-all-features.yaml``). For each env var of the
operator container, ``OperatorSettings.from_env`` with the rendered value must differ from ``from_env`` without
the variable (or, where the rendered value is the loader's default, with another valid value), in the field the
variable feeds. A variable the loader ignores fails with its name. The few variables consumed by something else
are in ``CONSUMED_ELSEWHERE`` with their consumer. Every mounted path must hold a path a setting points at (the
policy directory, the Slack webhook file, an advisor's API-key file, the trial cache key) or be the value of a
consumed variable.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from controller.errors import InvalidInput
from controller.reactor.settings import OperatorSettings

from .conftest import Helm, one

pytestmark = pytest.mark.helm

VALUES = Path(__file__).resolve().parent / "values-all-features.yaml"
#: What the kubelet puts in ``valueFrom.fieldRef`` variables.
FIELD_REFS = {"metadata.name": "sl-shiftlight-7d9f-abcde", "metadata.namespace": "shiftlight"}
#: Variables read by something other than the settings loader: the consumer, and why.
CONSUMED_ELSEWHERE = {
    "HOME": "Python libraries (kopf, httpx, the kubernetes client) put caches and config under $HOME; the root "
    "filesystem is read-only, so it points at the writable /tmp emptyDir",
}
#: Another valid value, for variables whose rendered value is also the loader's default.
ALTERNATIVES = {
    "SHIFTLIGHT_BACKEND": "simulator",
    "SHIFTLIGHT_LOG_FORMAT": "json",
    "SHIFTLIGHT_LEASE_NAMESPACE": "elsewhere",
    "SHIFTLIGHT_MAX_SPACE_COMBINATIONS": "5000",
    "SHIFTLIGHT_POLICY_MAX_BYTES": "131072",
}
#: The settings field each variable feeds (a variable not listed here must still change some field).
FEEDS = {
    "POD_NAME": "leader",
    "SHIFTLIGHT_BACKEND": "backend",
    "SHIFTLIGHT_LOG_LEVEL": "log_level",
    "SHIFTLIGHT_LOG_FORMAT": "log_format",
    "SHIFTLIGHT_HEALTH_PORT": "health_port",
    "SHIFTLIGHT_METRICS_PORT": "metrics_port",
    "SHIFTLIGHT_LEASE_NAME": "leader",
    "SHIFTLIGHT_LEASE_NAMESPACE": "leader",
    "SHIFTLIGHT_LEASE_DURATION_SECONDS": "leader",
    "SHIFTLIGHT_LEASE_RENEW_DEADLINE_SECONDS": "leader",
    "SHIFTLIGHT_LEASE_RETRY_PERIOD_SECONDS": "leader",
    "SHIFTLIGHT_PROMETHEUS_URL": "prometheus_url",
    "SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS": "prometheus_timeout_s",
    "SHIFTLIGHT_PROMETHEUS_TOKEN_FILE": "prometheus_token_file",
    "SHIFTLIGHT_PROMETHEUS_CA_FILE": "prometheus_ca_file",
    "SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY": "prometheus_verify_tls",
    "SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL": "prometheus_variant_label",
    "SHIFTLIGHT_PROMETHEUS_DEFAULT_VARIANT": "prometheus_default_variant",
    "SHIFTLIGHT_TIME_SCALE": "loop",
    "SHIFTLIGHT_SIMULATOR_CALIBRATION_FILE": "simulator",
    "SHIFTLIGHT_POLICY_DIR": "policy_dir",
    "SHIFTLIGHT_CANARY_NODE_SELECTOR": "canary_node_selector",
    "SHIFTLIGHT_CANARY_TOLERATIONS": "canary_tolerations",
    "SHIFTLIGHT_LLM_ADVISORS": "llm_advisors",
    "SHIFTLIGHT_SLACK_WEBHOOK_FILE": "slack_webhook_file",
    "SHIFTLIGHT_SLACK_CHANNEL": "slack_channel",
    "SHIFTLIGHT_SLACK_DIGEST_HOUR": "slack_digest_hour",
    "SHIFTLIGHT_TRIAL_PROGRESS_INTERVAL_SECONDS": "trial_progress_interval_s",
    "SHIFTLIGHT_TRIAL_CACHE_MAX_ENTRIES": "trial_cache_max_entries",
    "SHIFTLIGHT_MAX_SPACE_COMBINATIONS": "max_space_combinations",
    "SHIFTLIGHT_POLICY_MAX_BYTES": "policy_max_bytes",
    "SHIFTLIGHT_TRIAL_CACHE_KEY_FILE": "trial_cache_key_file",
    "SHIFTLIGHT_GRAFANA_URL": "grafana",
    "SHIFTLIGHT_GRAFANA_TOKEN_FILE": "grafana",
    "SHIFTLIGHT_GRAFANA_DATASOURCE_UID": "grafana",
    "SHIFTLIGHT_GRAFANA_ANNOTATIONS": "grafana",
    "SHIFTLIGHT_GRAFANA_DASHBOARD_UIDS": "grafana",
}
#: Without it the loader refuses to start: the variable is consumed (it names it or the one that needs it).
REFUSED_WITHOUT = "(refused without it)"


def rendered_container(helm: Helm) -> dict[str, Any]:
    deployment = one(helm.template("-f", str(VALUES), crds=False), "Deployment")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def rendered_env(container: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        else:
            env[var["name"]] = FIELD_REFS[var["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def changed_fields(a: OperatorSettings, b: OperatorSettings) -> set[str]:
    return {f.name for f in dataclasses.fields(OperatorSettings) if getattr(a, f.name) != getattr(b, f.name)}


def effect_of(env: dict[str, str], name: str) -> set[str]:
    """The settings fields that change when ``name`` is left out (or set to its alternative); a variable the loader
    cannot start without (Grafana's URL when its token file is set, say) is consumed too."""
    rendered = OperatorSettings.from_env(env)
    without = {k: v for k, v in env.items() if k != name}
    try:
        changed = changed_fields(rendered, OperatorSettings.from_env(without))
    except InvalidInput:
        return {REFUSED_WITHOUT}
    if not changed and name in ALTERNATIVES:
        changed = changed_fields(rendered, OperatorSettings.from_env({**env, name: ALTERNATIVES[name]}))
    return changed


def test_every_rendered_env_var_changes_a_setting(helm: Helm) -> None:
    env = rendered_env(rendered_container(helm))
    assert len(env) >= 20, sorted(env)  # every optional feature is on
    assert any(name.startswith("SHIFTLIGHT_LLM_") for name in env)
    ignored, misrouted = [], []
    for name in sorted(env):
        if name in CONSUMED_ELSEWHERE:
            continue
        changed = effect_of(env, name)
        if not changed:
            ignored.append(name)
        elif name in FEEDS and FEEDS[name] not in changed and changed != {REFUSED_WITHOUT}:
            misrouted.append(f"{name} -> {sorted(changed)} (expected {FEEDS[name]})")
    assert ignored == [], f"the chart renders env vars the settings loader ignores: {ignored}"
    assert misrouted == []


def test_an_ignored_env_var_is_named() -> None:
    env = {"SHIFTLIGHT_BACKEND": "kubernetes", "SHIFTLIGHT_NOT_A_SETTING": "1"}
    assert effect_of(env, "SHIFTLIGHT_BACKEND") == {"backend"}
    assert effect_of(env, "SHIFTLIGHT_NOT_A_SETTING") == set()


def test_the_rendered_values_reach_the_settings(helm: Helm) -> None:
    s = OperatorSettings.from_env(rendered_env(rendered_container(helm)))
    assert (s.backend, s.log_level, s.log_format) == ("kubernetes", "debug", "text")
    assert s.prometheus_timeout_s == 25
    assert s.canary_node_selector == {"shiftlight.dev/pool": "canary"}
    assert [(t.key, t.operator, t.effect) for t in s.canary_tolerations] == [
        ("shiftlight.dev/canary", "Exists", "NoSchedule")
    ]
    assert s.slack_digest_hour == 7
    assert [a.name for a in s.llm_advisors] == ["default", "local"]
    assert (s.leader.lease_name, s.leader.lease_namespace, s.leader.identity) == (
        "shiftlight-prod-leader",
        "shiftlight",
        "sl-shiftlight-7d9f-abcde",
    )
    assert s.grafana is not None and s.grafana.annotations
    assert (s.grafana.url, s.grafana.datasource_uid) == ("https://grafana.monitoring.svc:3000", None)
    assert s.grafana.dashboard_uids == ("vllm-latency", "team-a-serving")
    assert s.grafana.token_file == Path("/var/run/secrets/shiftlight/grafana/sa-token")
    prometheus = s.prometheus_settings()
    assert prometheus.bearer_token_file == Path("/var/run/secrets/shiftlight/prometheus/bearer")
    assert prometheus.ca_file == Path("/etc/shiftlight/prometheus-ca/ca.pem") and prometheus.verify_tls
    assert (prometheus.variant_label, prometheus.default_variant) == ("shiftlight_variant", "stable")
    # simulated time and a calibration profile are the simulator backend's only (test_chart_values_reach_settings)
    assert s.loop.time_scale == 1 and s.simulator.calibration_file is None


def test_every_mounted_path_is_consumed(helm: Helm) -> None:
    container = rendered_container(helm)
    env = rendered_env(container)
    settings = OperatorSettings.from_env(env)
    consumed_paths = [settings.policy_dir, settings.slack_webhook_file, settings.trial_cache_key_file]
    consumed_paths += [a.api_key_file for a in settings.llm_advisors]
    consumed_paths += [settings.grafana.token_file if settings.grafana else None]
    consumed_paths += [settings.prometheus_token_file, settings.prometheus_ca_file]
    consumed_paths += [settings.simulator.calibration_file]
    elsewhere = {env[name] for name in CONSUMED_ELSEWHERE if name in env}
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    assert len(mounts) >= 5, mounts  # tmp, policies, the Slack webhook, one advisor key, the Grafana token
    unused = [
        mount
        for mount in mounts
        if mount not in elsewhere and not any(p is not None and Path(p).is_relative_to(mount) for p in consumed_paths)
    ]
    assert unused == [], f"the chart mounts paths nothing reads: {unused}"
