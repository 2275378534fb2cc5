"""PrometheusSettings: environment parsing, validation errors that name the variable, selector building."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from controller.domain.observation import TargetRef
from controller.errors import InvalidInput, MetricsUnavailable
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def test_from_env_reads_every_variable(tmp_path: Path) -> None:
    token = tmp_path / "token"
    settings = PrometheusSettings.from_env(
        {
            "SHIFTLIGHT_PROMETHEUS_URL": "https://prom.monitoring:9090",
            "SHIFTLIGHT_PROMETHEUS_TOKEN_FILE": str(token),
            "SHIFTLIGHT_PROMETHEUS_CA_FILE": "/etc/ca.pem",
            "SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS": "2.5",
            "SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL": "shiftlight_dev_variant",
            "SHIFTLIGHT_PROMETHEUS_DEFAULT_VARIANT": "stable",
            "SHIFTLIGHT_PROMETHEUS_INSECURE_SKIP_VERIFY": "true",
            "UNRELATED": "x",
        }
    )
    assert settings.url == "https://prom.monitoring:9090"
    assert settings.bearer_token_file == token and settings.ca_file == Path("/etc/ca.pem")
    assert settings.timeout_s == 2.5 and not settings.verify_tls
    assert settings.variant_label == "shiftlight_dev_variant" and settings.default_variant == "stable"


def test_token_is_secret_in_repr() -> None:
    settings = PrometheusSettings.model_validate({"bearer_token": "s3cret"})
    assert "s3cret" not in repr(settings) and "s3cret" not in settings.model_dump_json()


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"SHIFTLIGHT_PROMETHEUS_URL": "prom:9090"}, "SHIFTLIGHT_PROMETHEUS_URL"),
        ({"SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS": "-1"}, "SHIFTLIGHT_PROMETHEUS_TIMEOUT_SECONDS"),
        ({"SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL": "bad-label"}, "SHIFTLIGHT_PROMETHEUS_VARIANT_LABEL"),
    ],
)
def test_invalid_env_names_the_variable(env: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        PrometheusSettings.from_env(env)
    assert info.value.field == field and info.value.source == "environment"


def test_selector_from_target_and_settings() -> None:
    target = TargetRef("prod", "chat", "llama")
    assert PrometheusSettings().selector(target).matchers() == '{model_name="llama",namespace="prod"}'
    settings = PrometheusSettings(match_namespace=False, extra_labels={"cluster": "eu-1"}, model_label="model")
    assert settings.selector(target).matchers() == '{model="llama",cluster="eu-1"}'


def test_unreadable_token_file_is_metrics_unavailable(tmp_path: Path) -> None:
    source = PrometheusMetrics(PrometheusSettings(bearer_token_file=tmp_path / "missing"))
    with pytest.raises(MetricsUnavailable, match="bearer token file"):
        source.observe(TargetRef("p", "n", "m"), start=T0, end=T0 + timedelta(minutes=5))
