"""InferencePool routing against the fake API serving the published InferencePool CRD: the candidate pool (and its
endpoint picker clone) is created next to the user's pool, the route splits by weight across the two pools in one
rule, and promote or rollback put the route back on the stable pool only and remove the candidate pool."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.adapters.kube.canary.manifest import OwnerRef
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.kube.pod_template import selector_matches
from controller.adapters.routing.gateway import GatewayRouter
from controller.adapters.routing.pool_manifests import POOL_GROUP, POOL_KIND
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from controller.reactor.kubernetes_backend import route_through_pools
from controller.trials.cache import CachedTrials
from tests.support.crd_schema import schema_errors
from tests.support.manifests import apply_manifests
from tests.support.operator_setup import kubernetes_settings
from tests.support.paths import KUBE_DATA

pytestmark = pytest.mark.kube

T = TargetRef(namespace="prod", name="workhorse", model="Qwen/Qwen3-32B")
CFG = EngineConfig(max_num_seqs=512, max_num_batched_tokens=4096)
OWNER = OwnerRef(api_version="shiftlight.dev/v1alpha1", kind="TunedService", name="workhorse", uid="uid-workhorse")
STACK = KUBE_DATA / "manifests" / "inferencepool-stack.yaml"
POOLS = (POOL_GROUP, "v1", "prod", "inferencepools")
ROUTES = ("gateway.networking.k8s.io", "v1", "prod", "httproutes")
JSON = dict[str, Any]


def _stack() -> list[JSON]:
    return [d for d in yaml.safe_load_all(STACK.read_text()) if d]


def _pool(api: client.ApiClient, name: str) -> JSON | None:
    try:
        pool: JSON = client.CustomObjectsApi(api).get_namespaced_custom_object(*POOLS, name)
    except client.ApiException as exc:
        assert exc.status == 404
        return None
    return pool


def _refs(api: client.ApiClient) -> list[JSON]:
    route: JSON = client.CustomObjectsApi(api).get_namespaced_custom_object(*ROUTES, "qwen-route")
    [rule] = route["spec"]["rules"]
    return list(rule["backendRefs"])


def _deployments(api: client.ApiClient) -> dict[str, JSON]:
    items = client.AppsV1Api(api).list_namespaced_deployment("prod").items
    return {d.metadata.name: api.sanitize_for_serialization(d) for d in items}


def _services(api: client.ApiClient) -> set[str]:
    return {s.metadata.name for s in client.CoreV1Api(api).list_namespaced_service("prod").items}


def _pod_labels(deployment: JSON) -> dict[str, str]:
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def _ref(name: str, weight: int) -> JSON:
    return {"group": POOL_GROUP, "kind": POOL_KIND, "name": name, "weight": weight}


def _on_the_stack(api: client.ApiClient, operator_api: client.ApiClient) -> tuple[KubeCluster, GatewayRouter]:
    """The user's InferencePool stack applied, and the operator's cluster and router over it."""
    apply_manifests(api, _stack())
    return _rollout(operator_api)


def _rollout(operator_api: client.ApiClient) -> tuple[KubeCluster, GatewayRouter]:
    cluster = KubeCluster(
        operator_api,
        template_deployment="qwen",
        container="vllm",
        stable_service="qwen",
        candidate_service="qwen-candidate",
    )
    router = GatewayRouter(
        operator_api,
        cluster,
        route="qwen-route",
        stable_service="qwen",
        candidate_service="qwen-candidate",
        owner=OWNER,
    )
    route_through_pools(cluster, router, T)
    cluster.on_promote.append(lambda t: router.set_weight(t, 0))
    cluster.deploy(T, "stable", EngineConfig(max_num_seqs=256), 2)
    cluster.deploy(T, "candidate", CFG, 1)
    return cluster, router


def test_candidate_pool_weights_across_two_pools_and_promote_removes_it(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    apply_manifests(api, _stack())
    stable_before = _pool(api, "qwen-pool")
    cluster, router = _rollout(operator_api)
    assert router.use_gateway and router.get_weight(T) == 0
    for weight in (5, 25, 50, 100):
        router.set_weight(T, weight)
        assert _refs(api) == [_ref("qwen-pool", 100 - weight), _ref("qwen-pool-candidate", weight)]  # one rule
        assert router.get_weight(T) == weight

    candidate = _pool(api, "qwen-pool-candidate")
    assert candidate is not None
    assert schema_errors(candidate) == []  # valid under the published CRD schema
    assert candidate["spec"]["targetPorts"] == [{"number": 8000}]
    assert candidate["spec"]["appProtocol"] == "http"
    assert candidate["spec"]["endpointPickerRef"] == {
        "group": "",
        "kind": "Service",
        "name": "qwen-pool-epp-candidate",
        "port": {"number": 9002},
        "failureMode": "FailOpen",
    }
    assert [(o["kind"], o["name"], o["uid"]) for o in candidate["metadata"]["ownerReferences"]] == [
        ("TunedService", "workhorse", "uid-workhorse")
    ]

    # the endpoint picker clone: its own pool, its own pods, owned by the TunedService
    deployments = _deployments(api)
    epp = deployments["qwen-pool-epp-candidate"]
    args = epp["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--pool-name") + 1] == "qwen-pool-candidate"
    assert args[args.index("--config-file") + 1] == "/config/default-plugins.yaml"  # the rest is the user's
    assert epp["spec"]["template"]["spec"]["serviceAccountName"] == "qwen-pool-epp"
    assert epp["metadata"]["ownerReferences"][0]["uid"] == "uid-workhorse"
    assert "deployment.kubernetes.io/revision" not in (epp["metadata"].get("annotations") or {})
    epp_service = client.CoreV1Api(api).read_namespaced_service("qwen-pool-epp-candidate", "prod")
    assert epp_service.metadata.owner_references[0].uid == "uid-workhorse"
    assert [(p.name, p.port) for p in epp_service.spec.ports] == [("grpc-ext-proc", 9002), ("http-metrics", 9090)]
    assert selector_matches(epp_service.spec.selector, _pod_labels(epp))
    stable_epp_selector = {"inferencepool": "qwen-pool-epp"}
    assert not selector_matches(stable_epp_selector, _pod_labels(epp))  # the user's picker Service skips it
    assert selector_matches(stable_epp_selector, _pod_labels(deployments["qwen-pool-epp"]))

    cluster.promote(T)
    assert _refs(api) == [_ref("qwen-pool", 100)]  # the stable pool only
    assert _pool(api, "qwen-pool-candidate") is None
    assert "qwen-pool-epp-candidate" not in _deployments(api)
    assert "qwen-pool-epp-candidate" not in _services(api)
    stable_after = _pool(api, "qwen-pool")
    assert stable_before is not None and stable_after is not None
    assert stable_after["spec"] == stable_before["spec"]  # the stable pool keeps its name and selector
    promoted = _deployments(api)["workhorse-stable"]
    assert selector_matches(stable_after["spec"]["selector"]["matchLabels"], _pod_labels(promoted))
    assert router.get_weight(T) == 0


def test_rollback_puts_the_route_back_on_the_stable_pool_and_removes_the_candidate_pool(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    cluster, router = _on_the_stack(api, operator_api)
    router.set_weight(T, 25)
    assert _pool(api, "qwen-pool-candidate") is not None
    router.set_weight(T, 0)  # what a Rollback does, then the candidate is retired
    cluster.retire(T, "candidate")
    assert _refs(api) == [_ref("qwen-pool", 100)]
    assert _pool(api, "qwen-pool-candidate") is None
    assert set(_deployments(api)) == {"qwen", "qwen-pool-epp", "workhorse-stable"}
    assert _services(api) == {"qwen-pool-epp"}  # the candidate was reached through its pool: no candidate Service


def test_a_changed_stable_pool_is_followed_by_the_candidate_pool(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    _, router = _on_the_stack(api, operator_api)
    router.set_weight(T, 5)
    co = client.CustomObjectsApi(api)
    stable = co.get_namespaced_custom_object(*POOLS, "qwen-pool")
    stable["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8001}]
    co.replace_namespaced_custom_object(*POOLS, "qwen-pool", stable)
    router.set_weight(T, 25)
    candidate = _pool(api, "qwen-pool-candidate")
    assert candidate is not None and schema_errors(candidate) == []
    assert candidate["spec"]["targetPorts"] == [{"number": 8000}, {"number": 8001}]
    assert candidate["spec"]["selector"]["matchLabels"] == {
        "shiftlight.dev/tuned-service": "workhorse",
        "shiftlight.dev/variant": "candidate",
    }


def test_pool_selectors_split_candidate_and_stable_pods(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    _, router = _on_the_stack(api, operator_api)
    router.set_weight(T, 50)
    stable_pool, candidate_pool = _pool(api, "qwen-pool"), _pool(api, "qwen-pool-candidate")
    assert stable_pool is not None and candidate_pool is not None
    stable_sel = stable_pool["spec"]["selector"]["matchLabels"]
    candidate_sel = candidate_pool["spec"]["selector"]["matchLabels"]
    deployments = _deployments(api)
    candidate_pods = _pod_labels(deployments["workhorse-candidate"])
    stable_pods = _pod_labels(deployments["workhorse-stable"])
    production_pods = _pod_labels(deployments["qwen"])
    epp_pods = _pod_labels(deployments["qwen-pool-epp-candidate"])
    assert selector_matches(candidate_sel, candidate_pods)
    assert not selector_matches(candidate_sel, stable_pods)
    assert not selector_matches(candidate_sel, production_pods)
    assert selector_matches(stable_sel, stable_pods)
    assert selector_matches(stable_sel, production_pods)
    # the pool selects on labels the Deployment's own selector does not: the candidate is kept out of it anyway
    assert not selector_matches(stable_sel, candidate_pods)
    assert candidate_pods["llm-d.ai/model"] == "qwen3-32b-candidate"
    assert not selector_matches(stable_sel, epp_pods) and not selector_matches(candidate_sel, epp_pods)


def test_a_pool_without_endpoint_picker_gets_a_candidate_pool_without_one(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    docs = _stack()
    for doc in docs:
        if doc["kind"] == "InferencePool":
            del doc["spec"]["endpointPickerRef"]
    apply_manifests(api, [d for d in docs if not d["metadata"]["name"].startswith("qwen-pool-epp")])
    _, router = _rollout(operator_api)
    router.set_weight(T, 25)
    candidate = _pool(api, "qwen-pool-candidate")
    assert candidate is not None and schema_errors(candidate) == []
    assert "endpointPickerRef" not in candidate["spec"]
    assert set(_deployments(api)) == {"qwen", "workhorse-stable", "workhorse-candidate"}  # no picker clone
    router.set_weight(T, 0)
    assert _refs(api) == [_ref("qwen-pool", 100)]
    assert _pool(api, "qwen-pool-candidate") is None


def test_a_picker_without_pool_name_flag_is_refused_and_nothing_changes(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    docs = _stack()
    for doc in docs:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "qwen-pool-epp":
            doc["spec"]["template"]["spec"]["containers"][0]["args"] = ["--endpoint-selector", "app=qwen"]
    apply_manifests(api, docs)
    before = copy.deepcopy(_refs(api))
    _, router = _rollout(operator_api)
    with pytest.raises(InvalidInput) as err:
        router.set_weight(T, 5)
    assert err.value.field == "--pool-name"
    assert "deployment prod/qwen-pool-epp" in err.value.source
    assert _refs(api) == before  # no weight on a pool that has no picker
    assert _pool(api, "qwen-pool-candidate") is None
    assert "qwen-pool-epp-candidate" not in _deployments(api)


def test_the_kubernetes_backend_keeps_candidates_and_trials_out_of_the_stable_pool(
    api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    from kubernetes import config

    from controller.adapters.kube.canary.pods import KubernetesLauncher
    from controller.adapters.kube.canary.progress import ReportingLoadTester
    from controller.crd.models import parse_tuned_service
    from controller.reactor.kubernetes_backend import KubernetesBackend
    from controller.trials.runner import TrialRunner
    from tests.support.kube_operator import G, V, tuned_service

    apply_manifests(api, _stack())
    ts = tuned_service(route="qwen-route")
    ts["spec"]["workload"] = {"deployments": ["qwen"], "service": "qwen", "httpRoute": "qwen-route"}
    body = client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    settings = kubernetes_settings(operator_kubeconfig, policy_dir)
    operator_api = config.new_client_from_config(str(operator_kubeconfig))
    spec, _ = parse_tuned_service(body)
    target = TargetRef(namespace="prod", name="workhorse", model=spec.model.name)
    runtime = KubernetesBackend(settings, operator_api).runtime(target, spec, body)
    pool_selector = {"llm-d.ai/model": "qwen3-32b", "llm-d.ai/role": "decode"}
    cluster = runtime.ports.cluster
    assert isinstance(cluster, KubeCluster) and pool_selector in cluster.selectors
    assert cluster.candidate_service is None  # the candidate pool reaches the candidate; no Service for it
    cached = runtime.ports.load_tester
    assert isinstance(cached, CachedTrials)  # results served only from signed entries that hold for the request
    reporting = cached.inner
    assert isinstance(reporting, ReportingLoadTester)  # trials report their progress in their Trial CRs
    runner = reporting.runner
    assert isinstance(runner, TrialRunner) and isinstance(runner.launcher, KubernetesLauncher)
    assert runner.launcher.pod_source is not None
    source = runner.launcher.pod_source()
    assert source is not None and pool_selector in source.selectors  # trial pods are kept out of it too
    assert isinstance(runtime.ports.router, GatewayRouter) and runtime.ports.router.pools.owner is not None
    assert runtime.ports.router.pools.owner.uid == body["metadata"]["uid"]


def test_the_simulator_mirror_leaves_a_pool_backed_route_alone(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    """The simulator backend mirrors weights onto the user's route; with InferencePool backends there are no
    candidate pods for a candidate pool to select, so the mirror changes nothing in the cluster."""
    apply_manifests(api, _stack())
    before = _refs(api)
    mirror = GatewayRouter(
        operator_api,
        KubeCluster(operator_api),
        route="qwen-route",
        stable_service="qwen",
        candidate_service="qwen-candidate",
        use_gateway=True,
        manage_pools=False,
    )
    mirror.set_weight(T, 25)
    assert _refs(api) == before
    assert _pool(api, "qwen-pool-candidate") is None
