"""Candidate InferencePool and endpoint-picker manifests (pure), checked against the published CRD schema."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from controller.adapters.kube.canary.manifest import OwnerRef
from controller.adapters.kube.pod_template import selector_matches
from controller.adapters.routing.gateway import set_route_weights
from controller.adapters.routing.pool_manifests import (
    candidate_name,
    candidate_pool_manifest,
    epp_deployment_clone,
    epp_selector,
    epp_service_clone,
    picker_service_name,
    stable_pool_name,
)
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput
from tests.support.crd_schema import schema_errors
from tests.support.paths import KUBE_DATA

T = TargetRef(namespace="prod", name="workhorse", model="Qwen/Qwen3-32B")
OWNER = OwnerRef(api_version="shiftlight.dev/v1alpha1", kind="TunedService", name="workhorse", uid="u-1")
STACK = KUBE_DATA / "manifests" / "inferencepool-stack.yaml"
JSON = dict[str, Any]


def _doc(kind: str, name: str) -> JSON:
    docs = [d for d in yaml.safe_load_all(STACK.read_text()) if d]
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


POOL = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}


@pytest.mark.parametrize(
    ("refs", "stable_backend", "expected"),
    [
        ([{**POOL, "name": "qwen-pool"}], "qwen", "qwen-pool"),  # the route's one pool
        ([{**POOL, "name": "qwen-pool"}, {**POOL, "name": "qwen-pool-candidate"}], "qwen", "qwen-pool"),
        ([{**POOL, "name": "qwen"}], "qwen", "qwen"),  # named like the TunedService's service
        ([{"name": "qwen", "port": 8000}], "qwen", None),  # a Service backend
        ([{**POOL, "name": "a"}, {**POOL, "name": "b"}], "qwen", None),  # which one is stable is unknown
        ([{"group": "", "kind": "Service", "name": "qwen-pool"}], "x", None),
    ],
)
def test_stable_pool_name(refs: list[JSON], stable_backend: str, expected: str | None) -> None:
    route = {"spec": {"rules": [{"backendRefs": refs}]}}
    assert stable_pool_name(route, stable_backend) == expected


def test_candidate_pool_is_the_stable_spec_with_the_candidate_selector() -> None:
    stable = _doc("InferencePool", "qwen-pool")
    before = copy.deepcopy(stable)
    pool = candidate_pool_manifest(stable, T, endpoint_picker="qwen-pool-epp-candidate", owner=OWNER)
    assert stable == before  # a copy
    assert schema_errors(pool) == []
    assert pool["metadata"]["name"] == "qwen-pool-candidate"
    assert pool["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pool["spec"]["selector"] == {
        "matchLabels": {"shiftlight.dev/tuned-service": "workhorse", "shiftlight.dev/variant": "candidate"}
    }
    assert pool["spec"]["endpointPickerRef"] == {
        **stable["spec"]["endpointPickerRef"],
        "name": "qwen-pool-epp-candidate",
    }
    assert {k: v for k, v in pool["spec"].items() if k not in ("selector", "endpointPickerRef")} == {
        k: v for k, v in stable["spec"].items() if k not in ("selector", "endpointPickerRef")
    }


def test_candidate_pool_without_picker_and_refusals() -> None:
    stable = _doc("InferencePool", "qwen-pool")
    bare = copy.deepcopy(stable)
    del bare["spec"]["endpointPickerRef"]
    pool = candidate_pool_manifest(bare, T, endpoint_picker=None)
    assert "endpointPickerRef" not in pool["spec"] and "ownerReferences" not in pool["metadata"]
    assert schema_errors(pool) == []
    assert picker_service_name(bare) is None
    with pytest.raises(InvalidInput) as err:
        candidate_pool_manifest(stable, T, endpoint_picker=None)
    assert err.value.field == "spec.endpointPickerRef"
    foreign = copy.deepcopy(stable)
    foreign["spec"]["endpointPickerRef"] = {"group": "example.com", "kind": "Picker", "name": "p"}
    with pytest.raises(InvalidInput) as err:
        picker_service_name(foreign)
    assert err.value.field == "spec.endpointPickerRef.kind"


def test_schema_check_catches_what_the_api_server_refuses() -> None:
    pool = candidate_pool_manifest(_doc("InferencePool", "qwen-pool"), T, endpoint_picker="e")
    broken = copy.deepcopy(pool)
    broken["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8000}]
    broken["spec"]["endpointPickerRef"].pop("port")
    broken["spec"]["selector"]["matchExpressions"] = [{"key": "a", "operator": "In", "values": ["b"]}]
    errors = schema_errors(broken)
    assert any(e.startswith("spec.targetPorts") for e in errors)
    assert any(e.startswith("spec.endpointPickerRef") for e in errors)
    assert "spec.selector.matchExpressions: unknown field" in errors
    assert schema_errors({**pool, "spec": {"selector": {"matchLabels": {}}}})  # targetPorts, minProperties


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--pool-name", "qwen-pool", "--v", "2"], ["--pool-name", "qwen-pool-candidate", "--v", "2"]),
        (["--pool-name=qwen-pool"], ["--pool-name=qwen-pool-candidate"]),
        (
            ["-pool-name", "qwen-pool", "-pool-namespace", "prod"],
            ["-pool-name", "qwen-pool-candidate", "-pool-namespace", "prod"],
        ),
    ],
)
def test_picker_clone_points_at_the_candidate_pool(args: list[str], expected: list[str]) -> None:
    epp = _doc("Deployment", "qwen-pool-epp")
    epp["spec"]["template"]["spec"]["containers"][0]["args"] = args
    clone = epp_deployment_clone(
        epp, T, pool="qwen-pool-candidate", selectors=[{"inferencepool": "qwen-pool-epp"}], owner=OWNER
    )
    pod = clone["spec"]["template"]
    assert pod["spec"]["containers"][0]["args"] == expected
    assert clone["metadata"]["name"] == "qwen-pool-epp-candidate"
    assert clone["spec"]["selector"] == {"matchLabels": epp_selector(T)}
    assert selector_matches(epp_selector(T), pod["metadata"]["labels"])
    assert not selector_matches({"inferencepool": "qwen-pool-epp"}, pod["metadata"]["labels"])
    assert "shiftlight.dev/variant" not in pod["metadata"]["labels"]  # no variant Deployment or pool selects it
    assert pod["spec"]["serviceAccountName"] == "qwen-pool-epp"
    assert clone["spec"]["strategy"] == {"type": "Recreate"}
    assert "annotations" not in clone["metadata"]  # only the server's revision annotation was there


def test_picker_without_pool_name_is_refused() -> None:
    epp = _doc("Deployment", "qwen-pool-epp")
    epp["spec"]["template"]["spec"]["containers"][0]["args"] = ["--endpoint-selector", "app=qwen"]
    with pytest.raises(InvalidInput) as err:
        epp_deployment_clone(epp, T, pool="qwen-pool-candidate", selectors=[])
    assert err.value.field == "--pool-name"


def test_picker_service_clone_selects_the_clone() -> None:
    svc = _doc("Service", "qwen-pool-epp")
    svc["spec"]["clusterIP"] = "10.0.0.7"
    clone = epp_service_clone(svc, T, owner=OWNER)
    assert clone["metadata"]["name"] == "qwen-pool-epp-candidate"
    assert clone["spec"]["selector"] == epp_selector(T)
    assert "clusterIP" not in clone["spec"]
    assert clone["spec"]["ports"] == svc["spec"]["ports"]


def test_candidate_names_fit() -> None:
    assert candidate_name("qwen-pool") == "qwen-pool-candidate"
    long = candidate_name("a" * 70, 63)
    assert len(long) == 63 and long.endswith("-candidate")


@pytest.mark.parametrize("weight", [5, 25, 50, 100])
def test_route_weights_across_two_pools(weight: int) -> None:
    route = {"spec": {"rules": [{"backendRefs": [{**POOL, "name": "qwen-pool"}]}]}}
    out = set_route_weights(route, stable="qwen-pool", candidate="qwen-pool-candidate", candidate_weight=weight,
                            drop_candidate_at_zero=True)  # fmt: skip
    assert out["spec"]["rules"][0]["backendRefs"] == [
        {**POOL, "name": "qwen-pool", "weight": 100 - weight},
        {**POOL, "name": "qwen-pool-candidate", "weight": weight},
    ]
    back = set_route_weights(out, stable="qwen-pool", candidate="qwen-pool-candidate", candidate_weight=0,
                             drop_candidate_at_zero=True)  # fmt: skip
    assert back["spec"]["rules"][0]["backendRefs"] == [{**POOL, "name": "qwen-pool", "weight": 100}]
