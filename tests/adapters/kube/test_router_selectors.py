"""A router that finds engines by its own label selector (production-stack's ``--k8s-label-selector``, built from
``servingEngineSpec.labels``) must not see candidate or trial pods: ``spec.workload.routerSelectors`` names those
label sets, and the variant pods get their values suffixed, as for the Deployment's and the Service's selectors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.adapters.kube.canary.pods import KubernetesLauncher
from controller.adapters.kube.canary.progress import ReportingLoadTester
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.kube.pod_template import selector_matches
from controller.crd.models import parse_tuned_service
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.trials.cache import CachedTrials
from controller.trials.runner import TrialRunner
from tests.support.kube_operator import G, V, kubernetes_loop, tuned_service
from tests.support.paths import MANIFESTS

pytestmark = pytest.mark.kube

PRODUCTION_STACK = MANIFESTS / "production-stack.yaml"
#: What the production-stack chart's router is started with for the engine above (``environment``, ``release``).
ROUTER_SELECTOR = {"environment": "test", "release": "test"}


def _deployment() -> dict[str, Any]:
    deployment = next(d for d in yaml.safe_load_all(PRODUCTION_STACK.read_text()) if d and d["kind"] == "Deployment")
    deployment["metadata"] = {"name": "workhorse", "namespace": "prod"}
    return deployment


def _candidate_pod_labels(
    api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path, workload: dict[str, Any]
) -> tuple[dict[str, str], tuple[dict[str, str], ...]]:
    client.AppsV1Api(api).create_namespaced_deployment("prod", client.V1Deployment.model_validate(_deployment()))
    (policy_dir / "plain.yaml").write_text("version: 1\nname: plain\nspace:\n  max_num_seqs: [64, 128]\n")
    ts = tuned_service(route=None)
    ts["spec"]["workload"] = {"deployments": ["workhorse"], "service": "workhorse", **workload}
    ts["spec"]["policy"] = {"preset": "plain"}
    body = client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    spec, _ = parse_tuned_service(body)
    target = TargetRef("prod", "workhorse", spec.model.name)
    runtime = kubernetes_loop(operator_kubeconfig, policy_dir).backend.runtime(target, spec, body)
    cluster = runtime.ports.cluster
    assert isinstance(cluster, KubeCluster)
    cluster.deploy(target, "candidate", EngineConfig(max_num_seqs=64), 1)
    candidate = client.AppsV1Api(api).read_namespaced_deployment("workhorse-candidate", "prod")
    labels: dict[str, str] = candidate.spec.template.metadata.labels
    cached = runtime.ports.load_tester
    assert isinstance(cached, CachedTrials)  # results served only from signed entries that hold for the request
    reporting = cached.inner
    assert isinstance(reporting, ReportingLoadTester) and isinstance(reporting.runner, TrialRunner)
    launcher = reporting.runner.launcher
    assert isinstance(launcher, KubernetesLauncher) and launcher.pod_source is not None
    source = launcher.pod_source()
    assert source is not None
    return labels, tuple(source.selectors)


def test_router_selectors_keep_candidate_and_trial_pods_out_of_a_router_s_discovery(
    api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    labels, trial_selectors = _candidate_pod_labels(
        api, operator_kubeconfig, policy_dir, {"routerSelectors": [ROUTER_SELECTOR]}
    )
    assert (labels["environment"], labels["release"]) == ("test-candidate", "test-candidate")
    assert not selector_matches(ROUTER_SELECTOR, labels)
    assert ROUTER_SELECTOR in trial_selectors  # trial pods are kept out of it too
    assert labels["app.kubernetes.io/part-of"] == "vllm-stack"  # labels no selector names are kept


def test_without_router_selectors_the_router_s_labels_are_kept_and_it_would_see_the_candidate(
    api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    labels, trial_selectors = _candidate_pod_labels(api, operator_kubeconfig, policy_dir, {})
    assert selector_matches(ROUTER_SELECTOR, labels)  # what the field is for
    assert ROUTER_SELECTOR not in trial_selectors
