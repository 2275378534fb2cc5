"""The canary trial tests' setup on the fake Kubernetes API: a launcher standing in for the canary Pods (it hands out
a fake engine), the TunedService on a policy preset, and the kubernetes backend's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest
from controller.domain.config import EngineConfig
from controller.ports import TrialBudget
from controller.reactor.settings import OperatorSettings
from controller.trials.engine.launchers import Launch
from tests.support.builders import shape
from tests.support.fake_engine import FakeEngine
from tests.support.kube_operator import G, V, production_deployment, tuned_service
from tests.support.operator_setup import kubernetes_settings

NS = "prod"
#: A short closed-loop trial: 4 streams of 32 tokens in, 8 out.
SHAPE = shape(0, 4, 32, 8)
BUDGET = TrialBudget(duration_s=20, warmup_s=0, max_requests=12, startup_timeout_s=5)


class CountingLauncher:
    """Stands in for the canary Pods: hands out the fake engine and counts every launch (and each manifest)."""

    source = "kubernetes"

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.launches: list[EngineConfig] = []
        self.manifests: list[KubernetesTrialManifest] = []

    def __call__(self, manifest: KubernetesTrialManifest) -> CountingLauncher:
        self.manifests.append(manifest)
        return self

    def start(self, config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
        self.launches.append(config)
        return Launch(self.engine.endpoint, "fake", True, 0.1)

    def logs(self, launch: Launch) -> tuple[str, ...]:
        return ()

    def stop(self, launch: Launch) -> None:
        pass


def tune_on_preset(api: client.ApiClient, policy_dir: Path, preset: str, space: str) -> dict[str, Any]:
    """The production Deployment (one GPU) and ``prod/workhorse`` tuned on policy preset ``preset``, whose search
    space is the YAML ``space``; the created TunedService's body."""
    client.AppsV1Api(api).create_namespaced_deployment(
        NS, client.V1Deployment.model_validate(production_deployment(tensor_parallel=1))
    )
    (policy_dir / f"{preset}.yaml").write_text(f"version: 1\nname: {preset}\nspace:\n{space}")
    ts = tuned_service(route=None)
    ts["spec"]["workload"]["container"] = "vllm"
    ts["spec"]["policy"] = {"preset": preset}
    body: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, NS, "tunedservices", ts)
    return body


def canary_settings(kubeconfig: Path, policy_dir: Path, **fields: Any) -> OperatorSettings:
    """The kubernetes backend's settings for a test: no endpoints, trial progress written at every poll."""
    return kubernetes_settings(kubeconfig, policy_dir, trial_progress_interval_s=0.0, **fields)
