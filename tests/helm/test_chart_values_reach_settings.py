"""Each chart value for the metrics source and the simulator, set alone, reaches the operator's settings.

The chart is rendered with one value set (``--set``); the operator's settings are built from the rendered
Deployment's environment (``OperatorSettings.from_env``, as the operator starts), and the file each path setting
points at is mounted from the Secret or ConfigMap the value names. Values the schema refuses fail the render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller.reactor.settings import OperatorSettings

from .conftest import CHART, Helm, one
from .test_chart_settings_consumed import rendered_env

pytestmark = pytest.mark.helm


def rendered(helm: Helm, *values: str) -> tuple[OperatorSettings, dict[str, Any]]:
    args = [arg for value in values for arg in ("--set", value)]
    deployment = one(helm.template(*args, crds=False), "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return OperatorSettings.from_env(rendered_env(pod["containers"][0])), pod


def mounted_from(pod: dict[str, Any], path: Path) -> dict[str, Any]:
    """The volume that holds ``path`` in the operator's container, and that path's key in it."""
    mounts = [m for m in pod["containers"][0]["volumeMounts"] if path.is_relative_to(m["mountPath"])]
    assert len(mounts) == 1, f"{path} is mounted {len(mounts)} times"
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[0]["name"])
    source = volume.get("secret") or volume.get("configMap")
    assert source is not None and [i["path"] for i in source["items"]] == [path.name]
    return dict(volume)


def test_by_default_no_token_the_system_cas_the_variant_label_and_real_time(helm: Helm) -> None:
    settings, _ = rendered(helm)
    prometheus = settings.prometheus_settings()
    assert prometheus.bearer_token_file is None and prometheus.ca_file is None and prometheus.verify_tls
    assert (prometheus.variant_label, prometheus.default_variant) == ("variant", None)
    assert settings.loop.time_scale == 1 and settings.simulator.calibration_file is None


def test_the_bearer_token_comes_from_the_named_secret_as_a_file(helm: Helm) -> None:
    settings, pod = rendered(helm, "prometheus.auth.existingSecret=mimir-reader", "prometheus.auth.secretKey=tok")
    token_file = settings.prometheus_settings().bearer_token_file
    assert token_file == Path("/var/run/secrets/shiftlight/prometheus/tok")
    assert mounted_from(pod, token_file)["secret"]["secretName"] == "mimir-reader"
    env = pod["containers"][0]["env"]
    assert not any("mimir-reader" in str(var) for var in env)  # the token is a file, never an env value


@pytest.mark.parametrize("kind", ["configMap", "secret"])
def test_the_ca_bundle_comes_from_a_configmap_or_a_secret(helm: Helm, kind: str) -> None:
    settings, pod = rendered(helm, f"prometheus.tls.ca.{kind}=corp-ca", "prometheus.tls.ca.key=bundle.pem")
    prometheus = settings.prometheus_settings()
    assert prometheus.ca_file == Path("/etc/shiftlight/prometheus-ca/bundle.pem") and prometheus.verify_tls
    volume = mounted_from(pod, prometheus.ca_file)
    assert (volume["configMap"]["name"] if kind == "configMap" else volume["secret"]["secretName"]) == "corp-ca"


def test_insecure_skip_verify_turns_verification_off(helm: Helm) -> None:
    settings, _ = rendered(helm, "prometheus.tls.insecureSkipVerify=true")
    assert settings.prometheus_settings().verify_tls is False


def test_the_variant_label_and_default_variant_reach_the_metrics_settings(helm: Helm) -> None:
    settings, _ = rendered(helm, "prometheus.variantLabel=track", "prometheus.defaultVariant=stable")
    prometheus = settings.prometheus_settings()
    assert (prometheus.variant_label, prometheus.default_variant) == ("track", "stable")


def test_the_time_scale_reaches_the_simulator_backends_loop_only(helm: Helm) -> None:
    settings, _ = rendered(helm, "operator.backend=simulator", "simulator.timeScale=60")
    assert settings.backend == "simulator" and settings.loop.time_scale == 60
    settings, _ = rendered(helm, "operator.backend=kubernetes", "simulator.timeScale=60")
    assert settings.backend == "kubernetes" and settings.loop.time_scale == 1  # real Deployments run in real time


def test_a_calibration_profile_is_mounted_from_its_configmap(helm: Helm) -> None:
    values = ["simulator.calibration.configMap=h200-cal", "simulator.calibration.key=h200.yaml"]
    settings, pod = rendered(helm, "operator.backend=simulator", *values)
    path = settings.simulator.calibration_file
    assert path == Path("/etc/shiftlight/calibration/h200.yaml")
    assert mounted_from(pod, path)["configMap"]["name"] == "h200-cal"
    settings, pod = rendered(helm, "operator.backend=kubernetes", *values)  # no simulated fleets to calibrate
    assert settings.simulator.calibration_file is None
    assert not any(v["name"] == "calibration" for v in pod["volumes"])


@pytest.mark.parametrize(
    ("values", "field"),
    [
        (["prometheus.tls.ca.configMap=a", "prometheus.tls.ca.secret=b"], "prometheus.tls.ca"),
        (["prometheus.tls.ca.secret=b", "prometheus.tls.insecureSkipVerify=true"], "prometheus.tls"),
        (["prometheus.variantLabel=shiftlight.dev/variant"], "prometheus.variantLabel"),
        (
            [
                "prometheus.url=",
                "grafana.url=https://grafana.example",
                "grafana.datasourceUid=prom",
                "grafana.existingSecret=g",
                "prometheus.auth.existingSecret=p",
            ],
            "prometheus.auth.existingSecret",
        ),
        (["simulator.timeScale=0"], "simulator.timeScale"),
        (["simulator.calibration.configMap=Not_A_Name"], "simulator.calibration.configMap"),
    ],
)
def test_the_schema_refuses_contradictions(helm: Helm, values: list[str], field: str) -> None:
    args = [arg for value in values for arg in ("--set", value)]
    result = helm.run("template", "sl", str(CHART), *args, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert field.split(".")[-1] in result.stderr
