"""Chart values that no other test sets, each set once and its effect on the rendered objects or on the operator's
settings asserted (``test_settings_exercised.py`` finds such values)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.reactor.settings import OperatorSettings

from .conftest import CHART, Helm, by_kind, one
from .test_chart_settings_consumed import rendered_env

pytestmark = pytest.mark.helm


def test_name_override_names_the_objects_and_their_labels(helm: Helm) -> None:
    docs = helm.template("--set", "nameOverride=tuner", crds=False)
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["name"] == "sl-tuner"
    assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "tuner"


def test_command_and_args_start_the_operator(helm: Helm) -> None:
    docs = helm.template(
        "--set", "operator.command={python,-m,controller}", "--set", "operator.args={operator,--verbose}", crds=False
    )
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "controller"]
    assert container["args"] == ["operator", "--verbose", "--all-namespaces"]


def test_the_slack_secret_key_names_the_mounted_webhook_file(helm: Helm) -> None:
    docs = helm.template("--set", "slack.enabled=true,slack.existingSecret=hooks,slack.secretKey=team-ml", crds=False)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    settings = OperatorSettings.from_env(rendered_env(pod["containers"][0]))
    assert settings.slack_webhook_file == Path("/var/run/secrets/shiftlight/slack/team-ml")
    volume = next(v for v in pod["volumes"] if v["name"] == "slack-secret")
    assert volume["secret"] == {"secretName": "hooks", "items": [{"key": "team-ml", "path": "team-ml"}]}


@pytest.mark.parametrize(("create", "roles"), [("true", 1), ("false", 0)])
def test_create_approver_role_ships_the_approver_cluster_role(helm: Helm, create: str, roles: int) -> None:
    docs = helm.template("--set", f"rbac.createApproverRole={create}", crds=False)
    approvers = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "shiftlight-approver"]
    assert len(approvers) == roles


def test_pod_labels_are_on_the_operator_pods_only(helm: Helm) -> None:
    docs = helm.template("--set", "podLabels.team=ml-platform", crds=False)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "ml-platform"
    assert "team" not in deployment["spec"]["selector"]["matchLabels"]  # the selector is immutable: never in it


def test_min_available_of_the_disruption_budget(helm: Helm) -> None:
    docs = helm.template("--set", "replicaCount=3,podDisruptionBudget.minAvailable=2", crds=False)
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 2


@pytest.mark.parametrize(
    ("value", "field", "expected"),
    [
        ("policies.maxSpaceCombinations=5000", "max_space_combinations", 5000),
        ("policies.maxBytes=131072", "policy_max_bytes", 131072),
    ],
)
def test_policy_budgets_reach_the_settings(helm: Helm, value: str, field: str, expected: int) -> None:
    pod = one(helm.template("--set", value, crds=False), "Deployment")["spec"]["template"]["spec"]
    assert getattr(OperatorSettings.from_env(rendered_env(pod["containers"][0])), field) == expected


def test_the_gpu_hour_and_api_prices_reach_the_settings(helm: Helm) -> None:
    args = "cost.gpuHourUsd=3.25,cost.apiInputUsdPerMillion=0.5,cost.apiOutputUsdPerMillion=2"
    pod = one(helm.template("--set", args, crds=False), "Deployment")["spec"]["template"]["spec"]
    settings = OperatorSettings.from_env(rendered_env(pod["containers"][0]))
    assert settings.gpu_hour_usd == 3.25
    assert (settings.api_input_usd_per_million, settings.api_output_usd_per_million) == (0.5, 2.0)
    default = one(helm.template(crds=False), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "SHIFTLIGHT_GPU_HOUR_USD" not in rendered_env(default)  # no price set: the GPU profile's, if any
    assert OperatorSettings.from_env(rendered_env(default)).gpu_hour_usd is None


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("prometheus.timeoutSeconds=31", "/prometheus/timeoutSeconds"),  # the operator caps the deadline at 30 s
        ("cost.gpuHourUsd=-1", "/cost/gpuHourUsd"),
        ("cost.apiOutputUsdPerMillion=-0.5", "/cost/apiOutputUsdPerMillion"),
    ],
)
def test_the_schema_refuses_out_of_range_values(helm: Helm, value: str, path: str) -> None:
    result = helm.run("template", "sl", str(CHART), "--set", value, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert path in result.stderr


def test_thirty_seconds_is_the_longest_prometheus_timeout_the_chart_takes(helm: Helm) -> None:
    pod = one(helm.template("--set", "prometheus.timeoutSeconds=30", crds=False), "Deployment")["spec"]["template"]
    assert OperatorSettings.from_env(rendered_env(pod["spec"]["containers"][0])).prometheus_timeout_s == 30
