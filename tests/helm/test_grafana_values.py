"""The chart's two ways in for metrics (Prometheus, or Grafana's datasource proxy) and Grafana annotations: exactly
one metrics source, the token only as a mounted file, and every variable the Grafana way renders is consumed."""

from __future__ import annotations

from typing import Any

import pytest

from controller.reactor.settings import OperatorSettings

from .conftest import Helm, one
from .test_chart_settings_consumed import REFUSED_WITHOUT, effect_of, rendered_env

pytestmark = pytest.mark.helm

THROUGH_GRAFANA = [
    "--set",
    "prometheus.url=",
    "--set",
    "grafana.url=https://grafana.example",
    "--set",
    "grafana.datasourceUid=prom-main",
    "--set",
    "grafana.existingSecret=shiftlight-grafana",
]


def container(helm: Helm, *args: str) -> dict[str, Any]:
    deployment = one(helm.template(*args, crds=False), "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    found: dict[str, Any] = spec["containers"][0]
    found["_volumes"] = spec["volumes"]
    return found


def test_metrics_through_grafana_render_the_proxy_settings_and_mount_the_token(helm: Helm) -> None:
    c = container(helm, *THROUGH_GRAFANA)
    env = rendered_env(c)
    assert "SHIFTLIGHT_PROMETHEUS_URL" not in env
    settings = OperatorSettings.from_env(env)
    assert settings.prometheus_url == "https://grafana.example/api/datasources/proxy/uid/prom-main"
    assert settings.grafana is not None and not settings.grafana.annotations
    mount = next(m for m in c["volumeMounts"] if m["name"] == "grafana-token")
    assert settings.grafana.token_file.is_relative_to(mount["mountPath"]) and mount["readOnly"]
    volume = next(v for v in c["_volumes"] if v["name"] == "grafana-token")
    assert volume["secret"]["secretName"] == "shiftlight-grafana"
    # every Grafana variable of this way in is consumed
    grafana_vars = [name for name in env if name.startswith("SHIFTLIGHT_GRAFANA_")]
    assert len(grafana_vars) == 3
    for name in grafana_vars:
        assert effect_of(env, name), name


@pytest.mark.security
def test_the_token_is_never_an_env_value(helm: Helm) -> None:
    c = container(helm, *THROUGH_GRAFANA, "--set", "grafana.annotations.enabled=true")
    for var in c["env"]:
        assert "secretKeyRef" not in str(var.get("valueFrom", {}))
    assert "token" not in {v["name"].lower() for v in c["env"]} - {"shiftlight_grafana_token_file"}


def test_default_values_read_prometheus_and_render_no_grafana(helm: Helm) -> None:
    env = rendered_env(container(helm))
    assert env["SHIFTLIGHT_PROMETHEUS_URL"].startswith("http://")
    assert not any(name.startswith("SHIFTLIGHT_GRAFANA_") for name in env)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # both ways in at once
        (THROUGH_GRAFANA[2:], "/prometheus/url"),
        # neither
        (["--set", "prometheus.url="], "/prometheus/url"),
        # Grafana without its token Secret, for metrics or for annotations
        (["--set", "prometheus.url=,grafana.url=https://g.example,grafana.datasourceUid=p"], "/grafana/existingSecret"),
        (["--set", "grafana.annotations.enabled=true,grafana.existingSecret=s"], "/grafana/url"),
        (["--set", "grafana.url=grafana:3000"], "/grafana/url"),
        (["--set", "grafana.datasourceUid=a/b,prometheus.url="], "/grafana/datasourceUid"),
        (["--set", "grafana.token=glsa_x"], "token"),
    ],
)
def test_values_schema_refuses_a_wrong_grafana_setup(helm: Helm, args: list[str], message: str) -> None:
    assert message in helm.schema_refusal(*args)


def test_a_variable_the_loader_cannot_start_without_counts_as_consumed() -> None:
    env = {"SHIFTLIGHT_GRAFANA_URL": "https://g.example", "SHIFTLIGHT_GRAFANA_TOKEN_FILE": "/t"}
    assert effect_of(env, "SHIFTLIGHT_GRAFANA_URL") == {REFUSED_WITHOUT}
