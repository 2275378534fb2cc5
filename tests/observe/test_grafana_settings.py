"""The operator's Grafana settings: metrics come from exactly one place (a Prometheus URL or a Grafana datasource
UID), the errors name the variables, and the chosen source is the one the kubernetes backend builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.errors import InvalidInput
from controller.observe.grafana_proxy import GrafanaMetrics
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.reactor.settings import OperatorSettings

GRAFANA = {
    "SHIFTLIGHT_GRAFANA_URL": "https://grafana.example",
    "SHIFTLIGHT_GRAFANA_TOKEN_FILE": "/var/run/secrets/shiftlight/grafana/token",
}


def test_a_datasource_uid_makes_grafanas_proxy_the_prometheus_url() -> None:
    s = OperatorSettings.from_env({**GRAFANA, "SHIFTLIGHT_GRAFANA_DATASOURCE_UID": "prom-main"})
    assert s.prometheus_url == "https://grafana.example/api/datasources/proxy/uid/prom-main"
    assert s.grafana is not None and s.grafana.token_file == Path("/var/run/secrets/shiftlight/grafana/token")
    assert not s.grafana.annotations
    source = s.metrics_source(PrometheusSettings(url=s.prometheus_url, timeout_s=7), slo=None)
    assert isinstance(source, GrafanaMetrics)
    assert (source.settings.url, source.settings.timeout_s) == (s.prometheus_url, 7)


def test_annotations_alone_keep_prometheus_as_the_metrics_source() -> None:
    s = OperatorSettings.from_env(
        {
            **GRAFANA,
            "SHIFTLIGHT_PROMETHEUS_URL": "http://prometheus:9090",
            "SHIFTLIGHT_GRAFANA_ANNOTATIONS": "true",
            "SHIFTLIGHT_GRAFANA_DASHBOARD_UIDS": "latency, , team-a",
        }
    )
    assert s.prometheus_url == "http://prometheus:9090"
    assert s.grafana is not None and s.grafana.annotations and s.grafana.dashboard_uids == ("latency", "team-a")
    source = s.metrics_source(PrometheusSettings(url=s.prometheus_url))
    assert type(source) is PrometheusMetrics


def test_without_grafana_nothing_changes() -> None:
    s = OperatorSettings.from_env({"SHIFTLIGHT_PROMETHEUS_URL": "http://prometheus:9090"})
    assert s.grafana is None and s.prometheus_url == "http://prometheus:9090"


@pytest.mark.parametrize(
    ("env", "field", "words"),
    [
        (
            {**GRAFANA, "SHIFTLIGHT_GRAFANA_DATASOURCE_UID": "p", "SHIFTLIGHT_PROMETHEUS_URL": "http://prom:9090"},
            "SHIFTLIGHT_PROMETHEUS_URL",
            ("SHIFTLIGHT_GRAFANA_DATASOURCE_UID", "not both"),
        ),
        ({"SHIFTLIGHT_GRAFANA_DATASOURCE_UID": "p"}, "SHIFTLIGHT_GRAFANA_URL", ("SHIFTLIGHT_GRAFANA_DATASOURCE_UID",)),
        ({"SHIFTLIGHT_GRAFANA_URL": "https://g"}, "SHIFTLIGHT_GRAFANA_TOKEN_FILE", ("token",)),
        ({**GRAFANA, "SHIFTLIGHT_GRAFANA_URL": "grafana:3000"}, "SHIFTLIGHT_GRAFANA_URL", ()),
        ({**GRAFANA, "SHIFTLIGHT_GRAFANA_DATASOURCE_UID": "a/b"}, "SHIFTLIGHT_GRAFANA_DATASOURCE_UID", ()),
        ({**GRAFANA, "SHIFTLIGHT_GRAFANA_ANNOTATIONS": "maybe"}, "SHIFTLIGHT_GRAFANA_ANNOTATIONS", ()),
    ],
)
def test_a_wrong_grafana_setting_is_refused_naming_the_variable(
    env: dict[str, str], field: str, words: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidInput) as raised:
        OperatorSettings.from_env(env)
    assert raised.value.field == field
    for word in words:
        assert word in str(raised.value)
