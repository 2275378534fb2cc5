"""Operator settings from the chart's environment, and the /healthz + /metrics endpoint."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.crd.models import parse_tuned_service
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from controller.observe.prometheus import PrometheusMetrics
from controller.reactor.kubernetes_backend import KubernetesBackend
from controller.reactor.loop import ControlLoop
from controller.reactor.metrics import HealthServer, OperatorMetrics
from controller.reactor.run import log_formatter
from controller.reactor.settings import OperatorSettings
from controller.reactor.simulator_backend import SimulatorBackend
from tests.support.kube_operator import AlwaysLeader, G, V, tuned_service

pytestmark = pytest.mark.kube


def test_settings_from_the_charts_environment() -> None:
    env = {
        "POD_NAME": "shiftlight-7d9f-abcde",
        "POD_NAMESPACE": "shiftlight",
        "SHIFTLIGHT_LEASE_NAME": "shiftlight-leader",
        "SHIFTLIGHT_LEASE_DURATION_SECONDS": "15",
        "SHIFTLIGHT_LEASE_RENEW_DEADLINE_SECONDS": "10",
        "SHIFTLIGHT_LEASE_RETRY_PERIOD_SECONDS": "2",
        "SHIFTLIGHT_HEALTH_PORT": "8080",
        "SHIFTLIGHT_METRICS_PORT": "9090",
        "SHIFTLIGHT_POLICY_DIR": "/etc/shiftlight/policies",
        "SHIFTLIGHT_CANARY_NODE_SELECTOR": '{"pool": "canary"}',
        "SHIFTLIGHT_PROMETHEUS_URL": "http://prometheus:9090",
    }
    s = OperatorSettings.from_env(env, all_namespaces=False, namespaces=("prod",))
    assert s.leader.identity == "shiftlight-7d9f-abcde"
    assert s.leader.lease_namespace == "shiftlight"
    assert (s.leader.lease_duration_s, s.leader.renew_deadline_s, s.leader.retry_period_s) == (15, 10, 2)
    assert (s.health_port, s.metrics_port) == (8080, 9090)
    assert s.policy_dir == Path("/etc/shiftlight/policies")
    assert s.canary_node_selector == {"pool": "canary"}
    assert s.namespaces == ("prod",) and not s.all_namespaces
    with pytest.raises(InvalidInput, match="SHIFTLIGHT_LEASE_DURATION_SECONDS"):
        OperatorSettings.from_env({"SHIFTLIGHT_LEASE_DURATION_SECONDS": "soon"})
    with pytest.raises(InvalidInput, match="SHIFTLIGHT_BACKEND"):
        OperatorSettings.from_env({"SHIFTLIGHT_BACKEND": "cloud"})


def test_health_and_metrics_endpoint() -> None:
    metrics = OperatorMetrics()
    metrics.decisions.labels(action="SetWeights", code="step").inc()
    metrics.weight.labels(target="prod/workhorse").set(25)
    healthy = [True]
    server = HealthServer(
        metrics, lambda: (healthy[0], "ok" if healthy[0] else "leader election stopped"), host="127.0.0.1"
    ).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        body = urllib.request.urlopen(f"{base}/metrics").read().decode()
        for name in (
            'shiftlight_decisions_total{action="SetWeights",code="step"} 1.0',
            'shiftlight_rollout_weight{target="prod/workhorse"} 25.0',
            "shiftlight_reconcile_duration_seconds_bucket",
            "shiftlight_trials_total",
            "shiftlight_rollouts_total",
            "shiftlight_rollbacks_total 0.0",
            "shiftlight_errors_total",
        ):
            assert name in body
        assert urllib.request.urlopen(f"{base}/healthz").read() == b"ok\n"
        healthy[0] = False
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/healthz")
        assert err.value.code == 503
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SHIFTLIGHT_LOG_FORMAT", "xml"),
        ("SHIFTLIGHT_LOG_LEVEL", "verbose"),
        ("SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS", "0"),
        ("SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS", "soon"),
        ("SHIFTLIGHT_CANARY_NODE_SELECTOR", "{not json"),
        ("SHIFTLIGHT_CANARY_NODE_SELECTOR", '{"pool": 1}'),
        ("SHIFTLIGHT_CANARY_TOLERATIONS", '[{"key": "k", "operator": "Maybe"}]'),
        ("SHIFTLIGHT_CANARY_TOLERATIONS", '{"key": "k"}'),
        ("SHIFTLIGHT_SLACK_DIGEST_HOUR", "24"),
        ("SHIFTLIGHT_SLACK_DIGEST_HOUR", "7.5"),
        ("SHIFTLIGHT_PROMETHEUS_URL", "prometheus:9090"),
        ("SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY", "maybe"),
        ("SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL", "shiftlight.dev/variant"),
        ("SHIFTLIGHT_TIME_SCALE", "0"),
        ("SHIFTLIGHT_TIME_SCALE", "fast"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(InvalidInput) as err:
        OperatorSettings.from_env({name: value})
    assert err.value.field == name


@pytest.mark.parametrize(
    ("env", "name"),
    [
        (
            {
                "SHIFTLIGHT_PROMETHEUS_CA_FILE": "/etc/ca/ca.crt",
                "SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY": "true",
            },
            "SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY",
        ),
        (
            {
                "SHIFTLIGHT_GRAFANA_URL": "https://grafana.example",
                "SHIFTLIGHT_GRAFANA_TOKEN_FILE": "/var/run/grafana/token",
                "SHIFTLIGHT_GRAFANA_DATASOURCE_UID": "prom",
                "SHIFTLIGHT_PROMETHEUS_TOKEN_FILE": "/var/run/prometheus/token",
            },
            "SHIFTLIGHT_PROMETHEUS_TOKEN_FILE",
        ),
    ],
)
def test_contradicting_metrics_settings_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(InvalidInput) as err:
        OperatorSettings.from_env(env)
    assert err.value.field == name


def test_the_time_scale_and_tls_settings_from_the_environment() -> None:
    s = OperatorSettings.from_env({"SHIFTLIGHT_TIME_SCALE": "60", "SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY": "true"})
    assert s.loop.time_scale == 60 and s.prometheus_settings().verify_tls is False
    s = OperatorSettings.from_env({"SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY": "false"})
    assert s.loop.time_scale == 1 and s.prometheus_settings().verify_tls is True


def test_the_kubeconfig_context_and_approval_checks_from_the_environment() -> None:
    s = OperatorSettings.from_env({"KUBECONFIG": "/home/me/.kube/config", "SHIFTLIGHT_CONTEXT": "kind-shiftlight"})
    assert (s.connection.kubeconfig, s.connection.context) == ("/home/me/.kube/config", "kind-shiftlight")
    assert s.verify_approvals is True
    assert OperatorSettings.from_env({"SHIFTLIGHT_VERIFY_APPROVALS": "false"}).verify_approvals is False


def test_log_format_json_is_one_object_per_line() -> None:
    formatter = log_formatter(OperatorSettings.from_env({"SHIFTLIGHT_LOG_FORMAT": "json"}))
    record = logging.LogRecord("controller.x", logging.WARNING, __file__, 1, "rolled back %s", ("prod/a",), None)
    line = json.loads(formatter.format(record))
    assert (line["level"], line["logger"], line["message"]) == ("WARNING", "controller.x", "rolled back prod/a")
    text = log_formatter(OperatorSettings.from_env({})).format(record)
    assert text.endswith("WARNING controller.x rolled back prod/a")


def test_kubernetes_backend_uses_the_operators_defaults(
    operator_api: client.ApiClient, settings_for: Callable[[str], OperatorSettings]
) -> None:
    env = {
        "SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS": "25",
        "SHIFTLIGHT_PROMETHEUS_TOKEN_FILE": "/var/run/secrets/shiftlight/prometheus/token",
        "SHIFTLIGHT_PROMETHEUS_CA_FILE": "/etc/shiftlight/prometheus-ca/ca.crt",
        "SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL": "track",
        "SHIFTLIGHT_PROMETHEUS_DEFAULT_VARIANT": "stable",
        "SHIFTLIGHT_CANARY_NODE_SELECTOR": '{"pool": "canary"}',
        "SHIFTLIGHT_CANARY_TOLERATIONS": '[{"key": "canary", "operator": "Exists", "effect": "NoSchedule"}]',
        "SHIFTLIGHT_SLACK_DIGEST_HOUR": "6",
    }
    base = settings_for("replica-a")
    from_env = OperatorSettings.from_env(env)
    settings = replace(
        base,
        backend="kubernetes",
        prometheus_timeout_s=from_env.prometheus_timeout_s,
        prometheus_token_file=from_env.prometheus_token_file,
        prometheus_ca_file=from_env.prometheus_ca_file,
        prometheus_variant_label=from_env.prometheus_variant_label,
        prometheus_default_variant=from_env.prometheus_default_variant,
        canary_node_selector=from_env.canary_node_selector,
        canary_tolerations=from_env.canary_tolerations,
        slack_digest_hour=from_env.slack_digest_hour,
    )
    backend = KubernetesBackend(settings, operator_api)

    def runtime(**spec_update: Any) -> Any:
        body = tuned_service(route=None)
        body["metadata"]["uid"] = f"u-{len(spec_update)}-{sorted(spec_update)}"
        body["spec"].update(spec_update)
        spec, _ = parse_tuned_service(body)
        return backend.runtime(TargetRef("prod", "workhorse", "m"), spec, body)

    plain = runtime()
    assert isinstance(plain.ports.metrics, PrometheusMetrics) and plain.ports.metrics.settings.timeout_s == 25
    read = plain.ports.metrics.settings  # what the TunedService's metrics source reads with
    assert read.bearer_token_file == Path("/var/run/secrets/shiftlight/prometheus/token")
    assert read.ca_file == Path("/etc/shiftlight/prometheus-ca/ca.crt") and read.verify_tls
    assert (read.variant_label, read.default_variant) == ("track", "stable")
    manifest = plain.ports.load_tester.inner.runner.launcher.manifest
    assert manifest.node_selector == {"pool": "canary"}
    assert [(t.key, t.operator) for t in manifest.tolerations] == [("canary", "Exists")]
    assert plain.reconciler.rules.digest is not None and plain.reconciler.rules.digest.hour == 6

    own = runtime(
        canaryPool={"nodeSelector": {"pool": "team"}, "tolerations": [{"key": "team", "operator": "Exists"}]},
        notifications={"slack": {"channel": "#team", "digestHour": None}},
    )
    manifest = own.ports.load_tester.inner.runner.launcher.manifest
    assert manifest.node_selector == {"pool": "team"}  # the TunedService's own pool wins
    assert [t.key for t in manifest.tolerations] == ["team"]
    assert own.reconciler.rules.digest is None  # its Slack settings switch the digest off


def test_the_simulator_refuses_a_gpu_it_has_no_profile_for(
    api: client.ApiClient, operator_api: client.ApiClient, settings_for: Callable[[str], OperatorSettings]
) -> None:
    """``gpuType: H100-80GB`` (the example's): no simulator profile, so ``Accepted=False`` with the reason, the
    code and the field, and nothing is simulated."""
    body = tuned_service(route=None)
    body["spec"]["gpuType"] = "H100-80GB"
    client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, "prod", "tunedservices", body)
    settings = settings_for("replica-a")
    backend = SimulatorBackend(settings, operator_api, background_trials=False)
    loop = ControlLoop(settings, operator_api, backend, AlwaysLeader(), OperatorMetrics())
    report = loop.cycle("prod", "workhorse")
    assert not report.acted
    stored = client.CustomObjectsApi(api).get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    accepted = {c["type"]: c for c in stored["status"]["conditions"]}["Accepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "SimulatorUnsupported")
    assert "spec.gpuType" in accepted["message"] and "simulator-unknown-gpu" in accepted["message"]
    assert "active_config" not in stored["status"] and "activeConfig" not in stored["status"]
