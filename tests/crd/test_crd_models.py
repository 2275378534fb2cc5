"""CR models: good CRs parse, bad ones fail with errors that name the object and the field."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.crd import models, schema
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.rollout import Approval, RolloutState
from controller.domain.slo import SLO
from controller.domain.status import Reason, ScheduledConfig, TargetStatus
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.errors import InvalidInput

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tunedservice.yaml"
NOW = datetime(2026, 11, 30, 9, 30, tzinfo=UTC)
CANDIDATE = EngineConfig(speculative_method="ngram", num_speculative_tokens=3, max_num_seqs=256)
SHAPE = TrafficShape(
    arrival_rate_rps=4,
    concurrency=16,
    prompt_tokens=LengthDistribution(mean=512),
    output_tokens=LengthDistribution(mean=128),
)


def example() -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return body


def test_example_parses_with_camel_case_spec_and_domain_field_names() -> None:
    spec, status = models.parse_tuned_service(example())
    assert spec.workload.deployments == ("llama-8b",)
    assert spec.workload.http_route == "llama-8b"
    assert spec.model.served_model_name == "llama-8b"
    assert spec.gpu_type == "H200-141GB"
    assert spec.slo == SLO(ttft_seconds=2.0, tpot_seconds=0.05)
    assert spec.policy.preset == "dense-8b-h200"
    assert spec.canary_pool.node_selector == {"shiftlight.dev/pool": "canary"}
    assert spec.canary_pool.tolerations[0].operator == "Exists"
    assert [w.name for w in spec.schedule] == ["day", "night"]
    assert spec.schedule[1].contains(23.5)
    assert spec.approval_mode == "manual-for-lossy"
    assert "replicas" not in spec.model_fields_set  # the example leaves the fleet's size alone
    assert status == TargetStatus()


def test_minimal_spec_gets_defaults_and_python_names_are_accepted() -> None:
    body = {
        "kind": "TunedService",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {"workload": {"deployments": ["m"], "service": "m"}, "model": {"name": "m"}, "gpu_type": "L4"},
    }
    spec, _ = models.parse_tuned_service(body)
    assert spec.gpu_type == "L4"
    assert spec.slo == SLO()
    assert spec.approval_mode == "manual-for-lossy"
    assert not spec.dry_run and not spec.paused
    assert spec.workload.port == 8000 and spec.workload.http_route is None
    assert spec.canary_pool.gpu_resource == "nvidia.com/gpu"
    wire = spec.to_wire()
    assert wire["gpuType"] == "L4" and "canaryPool" in wire and wire["workload"]["httpRoute"] is None
    assert models.TunedServiceSpec.model_validate(wire) == spec


def _set(body: dict[str, Any], path: str, value: Any) -> None:
    node = body
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        ("spec.workload.deployments", [], "spec.workload.deployments", "at least 1"),
        ("spec.workload.deployments", ["Llama_8B"], "spec.workload.deployments[0]", "not a valid Kubernetes name"),
        ("spec.workload.deployments", ["a", "a"], "spec.workload.deployments", "unique"),
        ("spec.workload.port", 70000, "spec.workload.port", "less than or equal to 65535"),
        ("spec.workload.routerSelectors", [{}], "spec.workload.routerSelectors", "1 to 16 labels"),
        ("spec.workload.routerSelectors", [{"a b": "x"}], "spec.workload.routerSelectors", "not a label key"),
        ("spec.workload.routerSelectors", [{"Bad_/x": "y"}], "spec.workload.routerSelectors", "not a label key"),
        ("spec.workload.routerSelectors", [{"env": "-x"}], "spec.workload.routerSelectors", "not a label value"),
        ("spec.workload.routerSelectors", [{"env": "x" * 64}], "spec.workload.routerSelectors", "not a label value"),
        ("spec.workload.routerSelectors", [{"env": "t"}] * 9, "spec.workload.routerSelectors", "at most 8"),
        ("spec.slo.ttft_seconds", 0, "spec.slo.ttft_seconds", "greater than 0"),
        ("spec.slo.ttftSeconds", 1, "spec.slo.ttftSeconds", "Extra inputs"),
        ("spec.gpuType", "", "spec.gpuType", "at least 1 character"),
        ("spec.approvalMode", "sometimes", "spec.approvalMode", "'auto', 'manual' or 'manual-for-lossy'"),
        ("spec.schedule.0.start_hour", 25, "spec.schedule[0].start_hour", "less than 24"),
        ("spec.schedule.1.name", "day", "spec.schedule", "repeated: day"),
        ("spec.policy.configMapRef", {"name": "p", "key": "k"}, "spec.policy", "not both"),
        ("spec.canaryPool.tolerations.0.value", "x", "spec.canaryPool.tolerations[0]", "must not set a value"),
        ("spec.canaryPool.gpuCount", -1, "spec.canaryPool.gpuCount", "greater than or equal to 0"),
        ("spec.notifications.slack.digestHour", 24, "spec.notifications.slack.digestHour", "less than or equal"),
        ("spec.replicas.minReplicas", 9, "spec.replicas", "minReplicas (9) must be <= maxReplicas (8)"),
        ("spec.dryRun", "maybe", "spec.dryRun", "valid boolean"),
        ("spec.surprise", 1, "spec.surprise", "Extra inputs are not permitted"),
    ],
)
def test_bad_specs_name_the_field(path: str, value: Any, field: str, words: str) -> None:
    body = example()
    _set(body, path, value)
    with pytest.raises(InvalidInput) as err:
        models.parse_tuned_service(body)
    assert err.value.source == "ml/llama-8b"
    assert err.value.field == field
    assert str(err.value).startswith(f"ml/llama-8b:{field}: ")
    assert words in str(err.value)


MINIMAL: dict[str, Any] = {
    "kind": "TunedService",
    "metadata": {"name": "m", "namespace": "ns"},
    "spec": {"workload": {"deployments": ["m"], "service": "m"}, "model": {"name": "m"}, "gpuType": "L4"},
}

STRICT = [
    # (path, value the lax parser would coerce, wire path in the error, words)
    ("spec.replicas.minReplicas", "2", "spec.replicas.minReplicas", "valid integer"),
    ("spec.replicas.min_replicas", "2", "spec.replicas.minReplicas", "valid integer"),
    ("spec.replicas.maxReplicas", 4.0, "spec.replicas.maxReplicas", "valid integer"),
    ("spec.dryRun", "yes", "spec.dryRun", "valid boolean"),
    ("spec.paused", 1, "spec.paused", "valid boolean"),
    ("spec.slo.ttft_seconds", "2", "spec.slo.ttft_seconds", "valid number"),
    ("spec.model.name", 5, "spec.model.name", "valid string"),
    ("spec.gpuType", 80, "spec.gpuType", "valid string"),
    ("spec.workload.port", "8000", "spec.workload.port", "valid integer"),
    ("spec.canaryPool.node_selector", {"pool": 1}, "spec.canaryPool.nodeSelector.pool", "valid string"),
    (
        "spec.canaryPool.tolerations",
        [{"tolerationSeconds": "60"}],
        "spec.canaryPool.tolerations[0].tolerationSeconds",
        "valid integer",
    ),
    (
        "spec.schedule",
        [{"name": "d", "start_hour": "8", "end_hour": 20}],
        "spec.schedule[0].start_hour",
        "valid number",
    ),
    ("spec.notifications.slack", {"digestHour": "9"}, "spec.notifications.slack.digestHour", "valid integer"),
]


@pytest.mark.security
@pytest.mark.parametrize(("path", "value", "field", "words"), STRICT)
def test_parsing_is_as_strict_as_the_crd_schema(path: str, value: Any, field: str, words: str) -> None:
    body = copy.deepcopy(MINIMAL)
    _set(body, path, value)
    with pytest.raises(InvalidInput) as err:
        models.parse_tuned_service(body)
    assert err.value.field == field
    assert str(err.value).startswith(f"ns/m:{field}: ")
    assert words in str(err.value)


def test_strict_parsing_keeps_numbers_for_floats_and_times_from_rfc3339_strings() -> None:
    body = copy.deepcopy(MINIMAL)
    _set(body, "spec.slo.ttft_seconds", 2)
    _set(body, "status", {"updated_at": "2026-11-30T09:30:00Z", "last_reasons": ["a"]})
    spec, status = models.parse_tuned_service(body)
    assert spec.slo.ttft_seconds == 2.0
    assert status.updated_at == NOW
    assert status.last_reasons == (Reason(code=None, message="a"),)  # stored before reasons carried codes


@pytest.mark.security
@pytest.mark.parametrize(
    "preset",
    ["../../var/run/secrets/kubernetes.io/serviceaccount/token", "/etc/passwd", "Default", "-x", "a.b", "x" * 64, ""],
)
def test_a_preset_is_a_name_never_a_path(preset: str) -> None:
    body = copy.deepcopy(MINIMAL)
    _set(body, "spec.policy.preset", preset)
    with pytest.raises(InvalidInput) as err:
        models.parse_tuned_service(body)
    assert err.value.field == "spec.policy.preset"


@pytest.mark.parametrize("preset", ["default", "dense-8b-h200", "a", "x" * 63])
def test_preset_names_parse(preset: str) -> None:
    body = copy.deepcopy(MINIMAL)
    _set(body, "spec.policy.preset", preset)
    assert models.parse_tuned_service(body)[0].policy.preset == preset


@pytest.mark.security
def test_a_tenant_cannot_name_a_slack_webhook_secret() -> None:
    body = copy.deepcopy(MINIMAL)
    _set(body, "spec.notifications.slack", {"webhookSecretRef": {"name": "operator-token", "key": "token"}})
    with pytest.raises(InvalidInput) as err:
        models.parse_tuned_service(body)
    assert err.value.field == "spec.notifications.slack.webhookSecretRef"
    assert "webhookSecretRef" not in json.dumps(schema.tuned_service_crd())


def test_missing_spec_wrong_kind_and_bad_status() -> None:
    body = example()
    del body["spec"]
    with pytest.raises(InvalidInput, match="spec is missing") as err:
        models.parse_tuned_service(body)
    assert err.value.field == "spec"
    with pytest.raises(InvalidInput, match="expected kind TunedService") as err:
        models.parse_tuned_service({**example(), "kind": "Trial"})
    assert err.value.field == "kind"
    with pytest.raises(InvalidInput) as err:
        models.parse_tuned_service({**example(), "status": {"phase": "Dancing"}})
    assert err.value.field == "status.phase"


def rolling_status() -> TargetStatus:
    rollout = RolloutState(
        id="day-20261130",
        from_config=STOCK,
        to_config=CANDIDATE,
        steps=(10, 50, 100),
        step_index=1,
        weight=50,
        started_at=NOW,
        expected_gain=1.5612,
        approvals=(Approval(by="alice@example.com", at=NOW, step=0, decision="approved"),),
    )
    return TargetStatus(phase=Phase.ROLLING_OUT, rollout=rollout, updated_at=NOW, last_reasons=("step 2/3",))


def test_status_round_trips_through_the_wire_form_with_summary() -> None:
    status = rolling_status()
    condition = models.Condition(type="Ready", status="True", reason="RolloutStep", last_transition_time=NOW)
    wire = models.status_to_wire(status, conditions=[condition], observed_generation=3)
    assert wire["phase"] == "RollingOut"
    assert wire["active_config"]["speculative_method"] == "none"  # domain field names are kept
    assert wire["rollout"]["approvals"][0]["by"] == "alice@example.com"
    assert wire["tuned_shape"] is None  # explicit null: a merge patch clears it
    assert wire["observedGeneration"] == 3
    assert wire["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "RolloutStep",
            "message": "",
            "lastTransitionTime": "2026-11-30T09:30:00Z",
            "observedGeneration": None,
        }
    ]
    assert wire["summary"] == {
        "activeConfig": "stock",
        "activeConfigKey": STOCK.key(),
        "candidateConfig": "ngram3+seqs256",
        "canaryWeight": 50,
        "gain": "1.56x",
        "gainRatio": 1.5612,
    }
    _, parsed = models.parse_tuned_service({**example(), "status": wire})
    assert parsed == status
    full = models.TunedServiceStatus.model_validate(wire)
    assert full.observed_generation == 3 and full.summary.canary_weight == 50


def test_summary_gain_from_the_schedule_when_no_rollout() -> None:
    entry = ScheduledConfig(
        window="day", config=CANDIDATE, shape=SHAPE, goodput_tokens_per_s=1500, stock_goodput_tokens_per_s=1000
    )
    summary = models.summarize(TargetStatus(active_config=CANDIDATE, schedule=(entry,)))
    assert (summary.active_config, summary.gain, summary.canary_weight, summary.candidate_config) == (
        "ngram3+seqs256",
        "1.50x",
        0,
        None,
    )
    assert models.summarize(TargetStatus()).gain == ""


def test_trial_and_config_rollout_bodies() -> None:
    trial_body = {
        "kind": "Trial",
        "metadata": {"name": "llama-8b-ngram3", "namespace": "ml"},
        "spec": {
            "target": "llama-8b",
            "config": CANDIDATE.model_dump(mode="json"),
            "shape": SHAPE.model_dump(mode="json"),
            "budget": {"durationSeconds": 60},
            "proposedBy": "advisor",
        },
        "status": {"phase": "Running", "configLabel": "ngram3+seqs256", "podName": "trial-abc"},
    }
    spec, status = models.parse_trial(trial_body)
    assert spec.config == CANDIDATE and spec.budget.duration_seconds == 60 and spec.proposed_by == "advisor"
    assert status.phase == "Running" and status.result is None

    bad = copy.deepcopy(trial_body)
    bad["spec"]["config"] = {"speculative_method": "ngram", "num_speculative_tokens": 0}
    with pytest.raises(InvalidInput, match="num_speculative_tokens must be >= 1") as err:
        models.parse_trial(bad)
    assert err.value.field == "spec.config" and err.value.source == "ml/llama-8b-ngram3"

    cro_spec, cro_status = models.config_rollout_from_state(rolling_status().rollout, target="llama-8b")  # type: ignore[arg-type]
    body = {
        "kind": "ConfigRollout",
        "metadata": {"name": "llama-8b-day-20261130", "namespace": "ml"},
        "spec": cro_spec.to_wire(),
        "status": cro_status.to_wire(),
    }
    assert body["spec"]["fromConfig"] == STOCK.model_dump(mode="json")
    assert body["status"]["approvals"][0]["by"] == "alice@example.com"
    assert body["status"]["toLabel"] == "ngram3+seqs256" and body["status"]["weight"] == 50
    assert models.parse_config_rollout(body) == (cro_spec, cro_status)

    for steps, words in [([50, 10, 100], "rise strictly"), ([10, 50], "must be 100"), ([0, 100], "1..100")]:
        broken = copy.deepcopy(body)
        broken["spec"]["steps"] = steps
        with pytest.raises(InvalidInput, match=words) as err:
            models.parse_config_rollout(broken)
        assert err.value.field == "spec.steps"
