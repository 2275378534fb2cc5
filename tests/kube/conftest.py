"""Fixtures for operator tests: the fake API, a kubeconfig, a short policy, operator replicas under KopfRunner."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kopf.testing import KopfRunner
from kubernetes import client, config

from controller.reactor.backends import Backend
from controller.reactor.run import OperatorRuntime
from controller.reactor.settings import ConnectionSettings, LeaderSettings, LoopSettings, OperatorSettings
from controller.testing.kube_api import KubeAPI, KubeAPIServer, running_kube_api

G, V = "shiftlight.dev", "v1alpha1"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def kube() -> Iterator[KubeAPIServer]:
    with running_kube_api(
        KubeAPI(tokens={"t-alice": "alice", "t-operator": "system:serviceaccount:shiftlight:op"})
    ) as srv:
        yield srv


@pytest.fixture
def operator_kubeconfig(kube: KubeAPIServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "operator.kubeconfig", user="operator", token="t-operator")


@pytest.fixture
def alice_kubeconfig(kube: KubeAPIServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "alice.kubeconfig", user="alice", token="t-alice", namespace="prod")


@pytest.fixture
def api(operator_kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(str(operator_kubeconfig))


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """The hybrid-MTP preset, short: three steps, one-minute bake, five requests per variant, manual approval."""
    policy = yaml.safe_load((REPO / "policies/v1/hybrid-mtp-workstation.yaml").read_text())
    policy["rollout"] = {"steps": [25, 50, 100], "bake_seconds": 60, "min_samples": 5}
    policy["trial_budget"] = {"max_trials": 3, "canary_gpu_minutes": 90, "trial_duration_s": 20, "warmup_s": 2}
    policy["llm"] = {"enabled": False}
    policy["approval"] = "manual"
    out = tmp_path / "policies"
    out.mkdir()
    (out / "e2e.yaml").write_text(yaml.safe_dump(policy))
    return out


def tuned_service(name: str = "workhorse", *, route: str | None = "workhorse") -> dict[str, Any]:
    workload: dict[str, Any] = {"deployments": [name], "service": name}
    if route:
        workload["httpRoute"] = route
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TunedService",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {
            "workload": workload,
            "model": {"name": "nemotron-3-super-nvfp4"},
            "gpuType": "gb300-dgx-station",
            "policy": {"preset": "e2e"},
            "approvalMode": "manual",
        },
    }


def http_route(name: str = "workhorse") -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": {
            "parentRefs": [{"name": "inference-gateway"}],
            "rules": [{"backendRefs": [{"name": name, "port": 8000, "weight": 100}]}],
        },
    }


@dataclass
class Replica:
    runtime: OperatorRuntime
    runner: KopfRunner


OperatorFactory = Callable[..., Any]


@pytest.fixture
def settings_for(operator_kubeconfig: Path, policy_dir: Path) -> Callable[[str], OperatorSettings]:
    def make(identity: str) -> OperatorSettings:
        return OperatorSettings(
            connection=ConnectionSettings(kubeconfig=str(operator_kubeconfig)),
            policy_dir=policy_dir,
            leader=LeaderSettings(
                identity=identity,
                lease_namespace="shiftlight",
                lease_duration_s=4.0,
                renew_deadline_s=3.0,
                retry_period_s=0.2,
            ),
            loop=LoopSettings(time_scale=300.0, idle_s=0.1, min_sleep_s=0.02),
            health_port=0,
            metrics_port=None,
            metrics_host="127.0.0.1",
        )

    return make


@contextmanager
def operator(
    settings: OperatorSettings, api: client.ApiClient, *, backend: Backend | None = None, release: bool = True
) -> Iterator[OperatorRuntime]:
    """One operator replica: leader election + endpoints + kopf under KopfRunner, stopped by leaving the block."""
    runtime = OperatorRuntime(settings, api=api, backend=backend).start()
    try:
        with KopfRunner(runtime.kopf_args(), registry=runtime.registry) as runner:
            yield runtime
        if runner.exception is not None:
            raise runner.exception
    finally:
        runtime.stop(release=release)


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.02) -> Any:
    """Poll until ``predicate`` returns something truthy (returned); fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
