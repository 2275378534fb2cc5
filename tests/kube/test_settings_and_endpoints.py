"""Operator settings from the chart's environment, and the /healthz + /metrics endpoint."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from controller.errors import InvalidInput
from controller.reactor.metrics import HealthServer, OperatorMetrics
from controller.reactor.settings import OperatorSettings

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
    metrics.decisions.labels(action="SetWeights").inc()
    metrics.weight.labels(target="prod/workhorse").set(25)
    healthy = [True]
    server = HealthServer(
        metrics, lambda: (healthy[0], "ok" if healthy[0] else "leader election stopped"), host="127.0.0.1"
    ).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        body = urllib.request.urlopen(f"{base}/metrics").read().decode()
        for name in (
            'shiftlight_decisions_total{action="SetWeights"} 1.0',
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
