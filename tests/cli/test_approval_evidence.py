"""While a rollout waits for approval, ``shiftctl describe`` and ``explain`` show the approver the candidate's exact
``vllm serve`` flags and their diff against the active config, the knobs that make it lossy (by the TunedService's
policy) and the quality gate's measured result, and the trials under their Trial CR names, the names ``shiftctl
trials`` and the Trial CRs use. Against the fake API through the typer entry point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from typer.testing import CliRunner

from controller.adapters.kube.crs import trial_name_for
from controller.cli.shiftctl.commands import app
from controller.crd.models import status_to_wire
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.trial import QualityReport

from .conftest import CANDIDATE, SHAPE, G, P, Seeder, V, awaiting_status, trial, tuned_service

pytestmark = pytest.mark.kube

runner = CliRunner()
#: MTP1 with an fp8 KV cache: lossy under the default quality gate.
LOSSY = EngineConfig(speculative_method="mtp", num_speculative_tokens=1, kv_cache_dtype="fp8", max_num_seqs=256)
FAILED = QualityReport(exact_match_rate=0.81, mean_logprob_divergence=0.09, prompts=64, passed=False, reason="drift")


def run(kubeconfig: Path, *args: str) -> Any:
    return runner.invoke(app, [*args, "--kubeconfig", str(kubeconfig)])


def lossy_awaiting() -> Any:
    status = awaiting_status()
    assert status.rollout is not None
    candidate = trial(LOSSY, 1458.0).model_copy(update={"quality": FAILED})
    return status.model_copy(
        update={
            "rollout": status.rollout.model_copy(update={"to_config": LOSSY}),
            "trials": (trial(STOCK, 900.0), candidate),
        }
    )


@pytest.mark.parametrize("verb", ["describe", "explain"])
def test_the_approver_sees_flags_diff_lossy_knobs_quality_and_trial_names(
    kubeconfig: Path, seed: Seeder, verb: str
) -> None:
    seed("workhorse", lossy_awaiting())
    out = run(kubeconfig, verb, "workhorse")
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert f"vllm serve flags: {' '.join(LOSSY.vllm_args())}" in text
    for line in (
        '+ --speculative-config {"method":"mtp","num_speculative_tokens":1}',
        "+ --max-num-seqs 256",
        "+ --kv-cache-dtype fp8",
        "fp8 KV cache",
    ):
        assert f"    {line}\n" in text
    assert "quality gate: failed (exact match 81.0%, logprob divergence 0.090 over 64 prompts (drift))" in text
    name = trial_name_for("workhorse", LOSSY, SHAPE)
    assert f"    {name} {LOSSY.label()}: goodput 1,458 tok/s" in text
    trials = run(kubeconfig, "trials", "workhorse", "-o", "name").stdout.splitlines()
    assert f"trial.shiftlight.dev/{name}" in trials  # one identifier: explain, describe, trials and the Trial CR


def test_evidence_in_json_and_only_while_approval_is_awaited(kubeconfig: Path, seed: Seeder) -> None:
    seed("workhorse", lossy_awaiting())
    shown = json.loads(run(kubeconfig, "explain", "workhorse", "-o", "json").stdout)["approvalEvidence"]
    assert shown["serveFlags"] == LOSSY.vllm_args()
    assert shown["lossy"] == ["fp8 KV cache"]
    assert shown["qualityGate"]["result"] == "failed"
    assert shown["trials"][0]["name"] == trial_name_for("workhorse", LOSSY, SHAPE)
    rolling = lossy_awaiting().model_copy(update={"phase": Phase.ROLLING_OUT})
    seed("rolling", rolling)
    assert "vllm serve flags:" not in run(kubeconfig, "describe", "rolling").stdout


def test_the_lossy_knobs_come_from_the_policy_configmap(kubeconfig: Path) -> None:
    api = config.new_client_from_config(str(kubeconfig))
    policy = "\n".join(
        [
            "quality_gate:",
            "  lossy:",
            "    - knob: async_scheduling",
            "      values: [true]",
            "      reason: async under review",
        ]
    )
    client.CoreV1Api(api).create_namespaced_config_map(
        "prod", {"metadata": {"name": "tuning"}, "data": {"policy.yaml": policy}}
    )
    body = tuned_service("workhorse")
    body["spec"]["policy"] = {"configMapRef": {"name": "tuning", "key": "policy.yaml"}}
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object(G, V, "prod", P, body)
    co.patch_namespaced_custom_object_status(
        G, V, "prod", P, "workhorse", {"status": status_to_wire(awaiting_status())}
    )
    out = run(kubeconfig, "describe", "workhorse").stdout
    assert "lossy knobs (rules: policy configmap prod/tuning:policy.yaml):\n    async under review\n" in out
    assert "quality gate: not-run" in out  # CANDIDATE is async and has no quality report
    assert CANDIDATE.async_scheduling is True
