"""The canary trials of the kubernetes backend gate lossy configs with the policy's own quality gate: its prompt
count and thresholds, against the stable variant's Service in the TunedService's namespace."""

from __future__ import annotations

from kubernetes import client

from controller.adapters.kube.canary.trial_runner import canary_trials
from controller.crd.models import parse_tuned_service
from controller.domain.config import STOCK, EngineConfig
from controller.domain.observation import TargetRef
from controller.policy import Policy

BODY = {
    "apiVersion": "shiftlight.dev/v1alpha1",
    "kind": "TunedService",
    "metadata": {"name": "chat", "namespace": "team-a", "uid": "u-1"},
    "spec": {
        "workload": {"deployments": ["chat"], "service": "chat", "port": 8000},
        "model": {"name": "/models/llama", "servedModelName": "llama"},
        "gpuType": "h200",
    },
}


def test_lossy_configs_get_the_policys_quality_gate_against_stable() -> None:
    spec, _ = parse_tuned_service(BODY)
    policy = Policy.model_validate(
        {"quality_gate": {"prompts": 5, "min_exact_match": 0.8, "max_logprob_divergence": 0.2}}
    )
    runner = canary_trials(
        client.ApiClient(),
        TargetRef("team-a", "chat", "/models/llama"),
        spec,
        BODY["metadata"],
        "vllm:1",
        policy=policy,
    )
    gate = runner.quality_gate
    assert gate is not None
    assert (gate.min_exact_match, gate.max_logprob_divergence, len(gate.prompts)) == (0.8, 0.2, 5)
    assert (gate.baseline_endpoint, gate.baseline_model) == ("http://chat.team-a.svc:8000", "llama")
    assert runner.gate_if is not None
    assert runner.gate_if(EngineConfig(kv_cache_dtype="fp8")) and not runner.gate_if(STOCK)


def test_without_a_policy_no_gate() -> None:
    spec, _ = parse_tuned_service(BODY)
    runner = canary_trials(client.ApiClient(), TargetRef("team-a", "chat", "m"), spec, BODY["metadata"], "vllm:1")
    assert runner.quality_gate is None
