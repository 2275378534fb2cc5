"""The Kubernetes trial Pod, validated offline against the Kubernetes schemas (kubernetes-validate)."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest, OwnerRef, Toleration
from controller.domain.config import EngineConfig

CONFIG = EngineConfig(
    speculative_method="ngram", num_speculative_tokens=3, prompt_lookup_max=4, max_num_seqs=64, omp_num_threads=1
)


def manifest() -> KubernetesTrialManifest:
    return KubernetesTrialManifest(
        namespace="ml",
        target_name="chat",
        model="/models/chat",
        served_model_name="chat",
        image="vllm/vllm-openai:v0.32.0",
        gpu_count=1,
        node_selector={"shiftlight.dev/pool": "canary", "nvidia.com/gpu.product": "H100"},
        tolerations=(Toleration(key="shiftlight.dev/canary", value="true"),),
        owner=OwnerRef(api_version="shiftlight.dev/v1alpha1", kind="TunedService", name="chat", uid="1234-abcd"),
        shutdown_timeout_s=30,
    )


def test_pod_is_valid_and_carries_the_trial_contract() -> None:
    pod = manifest().pod(CONFIG, "7f3a")
    kubernetes_validate.validate(pod, "1.30", strict=True)
    spec = pod["spec"]
    c = spec["containers"][0]
    assert spec["nodeSelector"] == {"shiftlight.dev/pool": "canary", "nvidia.com/gpu.product": "H100"}
    assert spec["tolerations"] == [
        {"key": "shiftlight.dev/canary", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "1" == c["resources"]["limits"]["nvidia.com/gpu"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    # the exact rendered engine arguments and env of the config
    args = c["args"]
    assert args[args.index("--shutdown-timeout") + 1] == "30"
    assert args[-len(CONFIG.vllm_args()) :] == CONFIG.vllm_args()
    assert json.loads(args[args.index("--speculative-config") + 1])["method"] == "ngram"
    assert {"name": "OMP_NUM_THREADS", "value": "1"} in c["env"]
    assert spec["terminationGracePeriodSeconds"] > 30
    # garbage collection: owned by the TunedService, labelled by target and config
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner == {
        "apiVersion": "shiftlight.dev/v1alpha1",
        "kind": "TunedService",
        "name": "chat",
        "uid": "1234-abcd",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    labels = pod["metadata"]["labels"]
    assert labels["shiftlight.dev/target"] == "chat"
    assert labels["shiftlight.dev/config-key"] == CONFIG.key()
    assert labels["app.kubernetes.io/managed-by"] == "shiftlight"
    assert spec["restartPolicy"] == "Never"


def test_validator_catches_a_broken_pod() -> None:
    pod = manifest().pod(CONFIG, "7f3a")
    pod["spec"]["containers"][0]["ports"][0]["containerPort"] = "eight-thousand"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, "1.30", strict=True)
