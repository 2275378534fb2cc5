"""Kubernetes Cluster and Gateway router adapters against the fake API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from controller.adapters.kube.client import translate
from controller.adapters.kube.cluster import KubeCluster
from controller.adapters.routing.gateway import GatewayRouter, replica_split, route_weight, set_route_weights
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.errors import ClusterConflict, InvalidInput, NotFound
from tests.support.kube_api import KubeAPI, running_kube_api
from tests.support.kube_operator import http_route
from tests.support.manifests import apply_manifests
from tests.support.paths import MANIFESTS

pytestmark = pytest.mark.kube

T = TargetRef(namespace="prod", name="workhorse", model="org/model")
CFG = EngineConfig(speculative_method="mtp", num_speculative_tokens=1, async_scheduling=True, max_num_seqs=256)


def _deployment(api: client.ApiClient, name: str) -> dict[str, object]:
    obj = client.AppsV1Api(api).read_namespaced_deployment(name, "prod")
    out: dict[str, object] = api.sanitize_for_serialization(obj)
    return out


def test_deploy_renders_vllm_args_scale_promote_retire(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    apps = client.AppsV1Api(api)
    production = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "workhorse"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "workhorse"}},
            "template": {
                "metadata": {"labels": {"app": "workhorse"}},
                "spec": {
                    "containers": [
                        {
                            "name": "engine",
                            "image": "registry/vllm:0.32",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        },
    }
    apps.create_namespaced_deployment("prod", client.V1Deployment.model_validate(production))
    cluster = KubeCluster(operator_api, template_deployment="workhorse", candidate_service="workhorse-candidate")
    cluster.deploy(T, "candidate", CFG, 1)
    cand = _deployment(api, "workhorse-candidate")
    container = cand["spec"]["template"]["spec"]["containers"][0]  # type: ignore[index]
    assert container["image"] == "registry/vllm:0.32"  # the production pod template is reused
    assert container["name"] == "engine"
    assert container["args"] == ["serve", "org/model", "--port", "8000", *CFG.vllm_args()]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert cand["metadata"]["labels"]["shiftlight.dev/variant"] == "candidate"  # type: ignore[index]
    assert client.CoreV1Api(api).read_namespaced_service("workhorse-candidate", "prod").spec.selector == {
        "shiftlight.dev/tuned-service": "workhorse",
        "shiftlight.dev/variant": "candidate",
    }
    cluster.deploy(T, "candidate", CFG, 3)  # update in place (replace under resourceVersion)
    cluster.scale(T, "candidate", 2)
    assert cluster.replicas(T, "candidate") == 2
    assert cluster.ready_replicas(T, "candidate") == 0
    apps.patch_namespaced_deployment_status("workhorse-candidate", "prod", {"status": {"readyReplicas": 2}})
    assert cluster.ready_replicas(T, "candidate") == 2
    cluster.deploy(T, "stable", EngineConfig(), 2)
    promoted: list[str] = []
    cluster.on_promote.append(lambda t: promoted.append(str(t)))
    assert cluster.promote(T) == CFG  # the config the candidate Deployment ran, read back from the cluster
    stable = _deployment(api, "workhorse-stable")
    assert stable["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "256"  # type: ignore[index]
    assert stable["metadata"]["labels"]["shiftlight.dev/variant"] == "stable"  # type: ignore[index]
    assert promoted == ["prod/workhorse"]
    assert cluster.replicas(T, "candidate") == 0  # retired
    cluster.retire(T, "candidate")  # already gone: fine
    with pytest.raises(NotFound):
        cluster.promote(T)


def test_events_carry_the_reason(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "shiftlight.dev", "v1alpha1", "prod", "tunedservices", {"metadata": {"name": "workhorse"}, "spec": {}}
    )
    KubeCluster(operator_api).record_event(T, "Rollback", "TTFT p95 regressed 40%", warning=True)
    (event,) = client.CoreV1Api(api).list_namespaced_event("prod").items
    assert (event.reason, event.message, event.type) == ("Rollback", "TTFT p95 regressed 40%", "Warning")
    assert event.involved_object.kind == "TunedService" and event.involved_object.uid


def test_external_autoscaler_is_found(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    cluster = KubeCluster(operator_api, template_deployment="workhorse")
    assert cluster.external_autoscaler(T) is None
    hpa = {
        "metadata": {"name": "workhorse-hpa"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "workhorse"},
            "maxReplicas": 4,
        },
    }
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(
        "prod", client.V2HorizontalPodAutoscaler.model_validate(hpa)
    )
    assert cluster.external_autoscaler(T) == "HorizontalPodAutoscaler/workhorse-hpa"


def test_gateway_router_sets_backend_weights(api: client.ApiClient, operator_api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object("gateway.networking.k8s.io", "v1", "prod", "httproutes", http_route())
    router = GatewayRouter(
        operator_api,
        KubeCluster(operator_api),
        route="workhorse",
        stable_service="workhorse",
        candidate_service="workhorse-candidate",
    )
    assert router.use_gateway
    assert router.get_weight(T) == 0
    router.set_weight(T, 25)
    route = co.get_namespaced_custom_object("gateway.networking.k8s.io", "v1", "prod", "httproutes", "workhorse")
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"name": "workhorse", "port": 8000, "weight": 75},
        {"name": "workhorse-candidate", "port": 8000, "weight": 25},
    ]
    assert router.get_weight(T) == 25
    router.set_weight(T, 100)
    assert router.get_weight(T) == 100


def test_replica_ratio_fallback_without_gateway_api(tmp_path: Path) -> None:
    with running_kube_api(KubeAPI(gateway=False)) as srv:
        api = config.new_client_from_config(str(srv.write_kubeconfig(tmp_path / "k")))
        cluster = KubeCluster(api)
        cluster.deploy(T, "stable", EngineConfig(), 4)
        cluster.deploy(T, "candidate", CFG, 0)
        router = GatewayRouter(api, cluster, route="workhorse", stable_service="s", candidate_service="c")
        assert not router.use_gateway  # no HTTPRoutes served: split by replica ratio
        router.set_weight(T, 25)
        assert (cluster.replicas(T, "stable"), cluster.replicas(T, "candidate")) == (3, 1)
        assert router.get_weight(T) == 25
        router.set_weight(T, 0)
        assert (cluster.replicas(T, "stable"), cluster.replicas(T, "candidate")) == (4, 0)


def test_pure_helpers() -> None:
    assert replica_split(4, 50) == (2, 2)
    assert replica_split(1, 5) == (1, 1)  # a candidate needs a replica; stable keeps one
    assert replica_split(3, 100) == (0, 3)
    route = http_route()
    weighted = set_route_weights(route, stable="workhorse", candidate="workhorse-candidate", candidate_weight=50)
    assert route_weight(weighted, stable="workhorse", candidate="workhorse-candidate") == 50
    assert route["spec"]["rules"][0]["backendRefs"] == [{"name": "workhorse", "port": 8000, "weight": 100}]  # copy


def test_translate_api_errors() -> None:
    body = json.dumps({"message": 'leases "x" not found'})
    assert isinstance(translate(client.ApiException(status=404, reason="Not Found", body=body)), NotFound)
    assert isinstance(translate(client.ApiException(status=422, reason="Invalid")), ClusterConflict)
    assert str(translate(client.ApiException(status=404, body=body), "lease")) == 'lease: leases "x" not found'


MANIFESTS = MANIFESTS


def test_candidate_is_derived_from_the_users_deployment_and_promote_keeps_the_users_labels(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "config-file.yaml").read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = "prod"
    apply_manifests(api, docs)
    cluster = KubeCluster(
        operator_api,
        template_deployment="deepseek-r1-distill-llama-8b",
        container="vllm-openai",
        stable_service="deepseek-r1-distill-llama-8b",
        candidate_service="deepseek-candidate",
    )
    source = cluster.pod_source(T)
    assert source is not None and source.config_maps  # the --config file was read from its ConfigMap
    config = EngineConfig(max_num_seqs=256, max_num_batched_tokens=2048)
    cluster.deploy(T, "candidate", config, 1)
    cand = _deployment(api, "workhorse-candidate")
    pod = cand["spec"]["template"]  # type: ignore[index]
    engine = pod["spec"]["containers"][0]
    command = engine["command"]
    assert command[command.index("--max-num-seqs") + 1] == "256"  # overrides the file's 128 on the command line
    assert command[command.index("--config") + 1] == "/etc/vllm/serve.yaml"  # the user's flags stay
    assert engine["volumeMounts"] == [{"name": "vllm-config", "mountPath": "/etc/vllm", "readOnly": True}]
    assert pod["metadata"]["labels"]["model.aibrix.ai/name"] == "deepseek-r1-distill-llama-8b-candidate"
    assert pod["metadata"]["labels"]["shiftlight.dev/variant"] == "candidate"
    cluster.deploy(T, "stable", EngineConfig(max_num_seqs=128, kv_cache_dtype="fp8", max_num_batched_tokens=8192), 1)
    cluster.promote(T)
    stable = _deployment(api, "workhorse-stable")
    labels = stable["spec"]["template"]["metadata"]["labels"]  # type: ignore[index]
    assert labels["model.aibrix.ai/name"] == "deepseek-r1-distill-llama-8b"  # back in the user's Service
    assert labels["shiftlight.dev/variant"] == "stable"
    stable_command = stable["spec"]["template"]["spec"]["containers"][0]["command"]  # type: ignore[index]
    assert stable_command[stable_command.index("--max-num-seqs") + 1] == "256"  # the candidate's config


def test_a_shell_string_deployment_is_refused_and_nothing_is_deployed(
    api: client.ApiClient, operator_api: client.ApiClient
) -> None:
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "shell-string.yaml").read_text()) if d]
    apply_manifests(api, docs)
    cluster = KubeCluster(operator_api, template_deployment="mistral-7b", container="mistral-7b")
    with pytest.raises(InvalidInput) as err:
        cluster.deploy(T, "candidate", CFG, 1)
    assert err.value.field == "--max-num-batched-tokens"
    assert "container mistral-7b" in err.value.source
    assert cluster.replicas(T, "candidate") == 0
    assert [d.metadata.name for d in client.AppsV1Api(api).list_namespaced_deployment("prod").items] == ["mistral-7b"]
