"""A TunedService starts from what its Deployment runs today: the first status's active config is the config the
user's own flags set, and every knob the policy does not tune keeps the Deployment's value in the candidates (a
Deployment's own ``--tensor-parallel-size 2`` is not silently dropped)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.crd.models import parse_tuned_service
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from controller.policy import load_policy, parse_policy
from tests.support.kube_operator import REPO, G, V, kubernetes_loop, production_deployment, tuned_service

pytestmark = pytest.mark.kube


def test_the_first_status_starts_from_the_deployments_running_config(
    api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    client.AppsV1Api(api).create_namespaced_deployment(
        "prod", client.V1Deployment.model_validate(production_deployment(tensor_parallel=2))
    )
    (policy_dir / "plain.yaml").write_text("version: 1\nname: plain\nspace:\n  max_num_seqs: [64, 128]\n")
    ts = tuned_service(route=None)
    ts["spec"]["workload"]["container"] = "vllm"
    ts["spec"]["policy"] = {"preset": "plain"}
    client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    loop = kubernetes_loop(operator_kubeconfig, policy_dir)
    loop.cycle("prod", "workhorse")  # no Prometheus here: the loop freezes, but it records where it starts
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    _, status = parse_tuned_service(body)
    running = status.active_config
    assert (running.tensor_parallel_size, running.max_num_seqs, running.enable_prefix_caching) == (2, 32, False)
    assert running.gpu_memory_utilization == pytest.approx(0.85)  # the later of the two spellings wins, as in vLLM
    spec, _ = parse_tuned_service(body)
    space = loop.backend.runtime(TargetRef("prod", "workhorse", spec.model.name), spec, body).reconciler.rules.space
    candidates = list(space.configs())
    assert candidates and {c.tensor_parallel_size for c in candidates} == {2}  # not tuned by the policy: kept
    assert {(c.enable_prefix_caching, c.gpu_memory_utilization) for c in candidates} == {(False, 0.85)}
    assert all(space.contains(c, fixed_ok=running) + space.violations(c) == [] for c in candidates)


@pytest.mark.parametrize(
    ("declared", "running", "expected"),
    [
        pytest.param("max_num_seqs: [64, 128]", EngineConfig(tensor_parallel_size=2), {"tensor_parallel_size": 2}),
        pytest.param(
            "base: {kv_cache_dtype: auto}\n  max_num_seqs: [64]",
            EngineConfig(kv_cache_dtype="fp8", max_num_batched_tokens=8192),
            {"kv_cache_dtype": "auto", "max_num_batched_tokens": 8192},
            id="the-policy-s-own-base-wins",
        ),
        pytest.param(
            "max_num_seqs: [64]",
            EngineConfig(max_num_seqs=512, enable_prefix_caching=False),
            {"max_num_seqs": 64, "enable_prefix_caching": False},
            id="tuned-knobs-come-from-the-space",
        ),
    ],
)
def test_policy_based_on_the_running_config(declared: str, running: EngineConfig, expected: dict[str, Any]) -> None:
    policy = parse_policy(f"space:\n  {declared}\n").based_on(running)
    (config, *_) = list(policy.space.configs())
    assert {k: getattr(config, k) for k in expected} == expected


def test_a_policy_whose_target_cannot_hold_the_running_config_is_refused_naming_the_space() -> None:
    policy = load_policy(REPO / "policies/v1/hybrid-mtp-workstation.yaml")  # one GPU per replica on this profile
    with pytest.raises(InvalidInput) as err:
        policy.based_on(EngineConfig(tensor_parallel_size=2))
    assert err.value.field == "space" and "tensor_parallel_size 2" in str(err.value)
