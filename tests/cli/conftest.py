"""Fixtures for shiftctl tests: the fake Kubernetes API on a thread, a kubeconfig, seeded TunedServices."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from controller.crd.models import status_to_wire
from controller.domain.config import STOCK, EngineConfig
from controller.domain.phases import Phase
from controller.domain.rollout import RolloutState
from controller.domain.slo import SLO
from controller.domain.status import ScheduledConfig, TargetStatus
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import Percentiles, TrialResult, TrialStatus
from tests.support.kube_api import KubeAPI, KubeAPIServer, running_kube_api

G, V, P = "shiftlight.dev", "v1alpha1", "tunedservices"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
CANDIDATE = EngineConfig(speculative_method="mtp", num_speculative_tokens=1, async_scheduling=True, max_num_seqs=256)
SHAPE = TrafficShape(
    arrival_rate_rps=4.0,
    concurrency=64,
    prompt_tokens=LengthDistribution(mean=512),
    output_tokens=LengthDistribution(mean=512),
)


def trial(config: EngineConfig, goodput: float, status: TrialStatus = TrialStatus.MEASURED) -> TrialResult:
    measured = status is TrialStatus.MEASURED
    return TrialResult(
        config=config,
        shape=SHAPE,
        slo=SLO(),
        status=status,
        reason="" if measured else "engine refused the config",
        goodput_tokens_per_s=goodput if measured else 0.0,
        output_tokens_per_s=goodput * 1.1 if measured else 0.0,
        ttft_s=Percentiles(p50=0.2, p95=0.5, p99=0.8) if measured else None,
        tpot_s=Percentiles(p50=0.02, p95=0.04, p99=0.05) if measured else None,
        completed=100 if measured else 0,
    )


def awaiting_status(**rollout: Any) -> TargetStatus:
    state = RolloutState(
        id="r-20261130-0900",
        from_config=STOCK,
        to_config=CANDIDATE,
        steps=(25, 50, 100),
        started_at=T0,
        reason="1.62x goodput on the day shape",
        proposed_by="optimizer",
        expected_gain=1.62,
        **rollout,
    )
    return TargetStatus(
        phase=Phase.AWAITING_APPROVAL,
        rollout=state,
        trials=(
            trial(STOCK, 900.0),
            trial(CANDIDATE, 1458.0),
            trial(EngineConfig(kv_cache_dtype="fp8"), 0, TrialStatus.INFEASIBLE),
        ),
        schedule=(
            ScheduledConfig(
                window="day",
                config=CANDIDATE,
                shape=SHAPE,
                goodput_tokens_per_s=1458.0,
                stock_goodput_tokens_per_s=900.0,
                replicas=2,
                reason="best measured goodput",
            ),
        ),
        last_reasons=("approval needed before shifting traffic to mtp1+async+seqs256",),
        history=("2026-11-29: stock -> seqs128 promoted",),
        window="day",
    )


def tuned_service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TunedService",
        "metadata": {"name": name},
        "spec": {
            "workload": {"deployments": [name], "service": name},
            "model": {"name": "nemotron-3-super-nvfp4"},
            "gpuType": "gb300-dgx-station",
            "approvalMode": "manual",
        },
    }


@pytest.fixture
def kube() -> Iterator[KubeAPIServer]:
    with running_kube_api(
        KubeAPI(tokens={"t-alice": "alice", "t-bob": "bob"}, denials={("bob", "patch", "tunedservices/status")})
    ) as srv:
        yield srv


@pytest.fixture
def kubeconfig(kube: KubeAPIServer, tmp_path: Path) -> Path:
    return kube.write_kubeconfig(tmp_path / "kubeconfig", user="alice", token="t-alice", namespace="prod")


Seeder = Callable[..., dict[str, Any]]


@pytest.fixture
def seed(kubeconfig: Path) -> Seeder:
    api = config.new_client_from_config(str(kubeconfig))
    co = client.CustomObjectsApi(api)

    def _seed(name: str = "workhorse", status: TargetStatus | None = None, namespace: str = "prod") -> dict[str, Any]:
        co.create_namespaced_custom_object(G, V, namespace, P, tuned_service(name))
        body: dict[str, Any] = co.patch_namespaced_custom_object_status(
            G, V, namespace, P, name, {"status": status_to_wire(status or awaiting_status())}
        )
        return body

    return _seed


@pytest.fixture
def read(kubeconfig: Path) -> Callable[[str], dict[str, Any]]:
    api = config.new_client_from_config(str(kubeconfig))
    co = client.CustomObjectsApi(api)

    def _read(name: str, namespace: str = "prod") -> dict[str, Any]:
        body: dict[str, Any] = co.get_namespaced_custom_object(G, V, namespace, P, name)
        return body

    return _read
