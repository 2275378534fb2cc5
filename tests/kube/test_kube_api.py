"""The fake Kubernetes API itself, exercised over real HTTP with the official client and raw httpx."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from tests.support.kube_api import (
    APICall,
    KubeAPI,
    KubeAPIServer,
    StatusError,
    field_selector_matches,
    label_selector_matches,
    running_kube_api,
)

pytestmark = pytest.mark.kube

G, V = "shiftlight.dev", "v1alpha1"


@pytest.fixture
def server() -> Iterator[KubeAPIServer]:
    with running_kube_api() as srv:
        yield srv


@pytest.fixture
def api_client(server: KubeAPIServer, tmp_path: Path) -> client.ApiClient:
    return config.new_client_from_config(str(server.write_kubeconfig(tmp_path / "kubeconfig")))


def _tsvc(name: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TunedService",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"model": "m"},
        **extra,
    }


def test_create_assigns_identity_and_answers_201(server: KubeAPIServer) -> None:
    r = httpx.post(f"{server.url}/apis/{G}/{V}/namespaces/prod/tunedservices", json=_tsvc("a"))
    assert r.status_code == 201
    meta = r.json()["metadata"]
    assert meta["namespace"] == "prod"
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1
    assert int(meta["resourceVersion"]) > 0
    # the namespace now exists and is listable (kopf and kubectl need GET /api/v1/namespaces)
    names = [n["metadata"]["name"] for n in httpx.get(f"{server.url}/api/v1/namespaces").json()["items"]]
    assert {"default", "prod"} <= set(names)
    assert httpx.get(f"{server.url}/api/v1/namespaces/prod").json()["kind"] == "Namespace"


def test_official_client_gets_the_created_object_back(api_client: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api_client)
    created = co.create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("a"))
    assert created["metadata"]["name"] == "a"  # 201 with a body: the sync client returns it (not None)


def test_duplicate_create_is_409_already_exists(api_client: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api_client)
    co.create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("a"))
    with pytest.raises(client.ApiException) as err:
        co.create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("a"))
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "AlreadyExists"


def test_generate_name(server: KubeAPIServer) -> None:
    body = {"metadata": {"generateName": "ev-"}, "reason": "X", "message": "y"}
    r = httpx.post(f"{server.url}/api/v1/namespaces/default/events", json=body)
    assert r.status_code == 201
    assert r.json()["metadata"]["name"].startswith("ev-")


def test_resource_version_bumps_on_every_write_and_generation_on_spec_changes(
    api_client: client.ApiClient,
) -> None:
    co = client.CustomObjectsApi(api_client)
    a = co.create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("a"))
    b = co.patch_namespaced_custom_object(G, V, "default", "tunedservices", "a", {"metadata": {"labels": {"x": "1"}}})
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    assert b["metadata"]["generation"] == 1  # metadata-only change
    c = co.patch_namespaced_custom_object(G, V, "default", "tunedservices", "a", {"spec": {"model": "n"}})
    assert c["metadata"]["generation"] == 2
    d = co.patch_namespaced_custom_object_status(G, V, "default", "tunedservices", "a", {"status": {"phase": "X"}})
    assert d["metadata"]["generation"] == 2  # status changes never bump the generation
    assert int(d["metadata"]["resourceVersion"]) > int(c["metadata"]["resourceVersion"])
    # a no-op write changes nothing, not even the resourceVersion
    e = co.patch_namespaced_custom_object_status(G, V, "default", "tunedservices", "a", {"status": {"phase": "X"}})
    assert e["metadata"]["resourceVersion"] == d["metadata"]["resourceVersion"]


def test_status_subresource_isolation(api_client: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api_client)
    created = co.create_namespaced_custom_object(
        G, V, "default", "tunedservices", _tsvc("a", status={"phase": "Sneaky"})
    )
    assert "status" not in created  # create drops status when the status subresource is on
    co.patch_namespaced_custom_object_status(G, V, "default", "tunedservices", "a", {"status": {"phase": "Real"}})
    # writes to the main resource ignore status ...
    main = co.patch_namespaced_custom_object(
        G, V, "default", "tunedservices", "a", {"spec": {"model": "n"}, "status": {"phase": "Ignored"}}
    )
    assert main["status"] == {"phase": "Real"}
    assert main["spec"]["model"] == "n"
    # ... and writes to /status only change status
    st = co.patch_namespaced_custom_object_status(
        G, V, "default", "tunedservices", "a", {"spec": {"model": "ignored"}, "status": {"phase": "Next"}}
    )
    assert st["spec"]["model"] == "n"
    assert st["status"] == {"phase": "Next"}


def test_json_patch_test_failure_is_422_and_changes_nothing(api_client: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api_client)
    a = co.create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("a"))
    rv = a["metadata"]["resourceVersion"]
    ok = co.patch_namespaced_custom_object_status(
        G, V, "default", "tunedservices", "a",
        [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
         {"op": "add", "path": "/status", "value": {"phase": "One"}}],
        _content_type="application/json-patch+json",
    )  # fmt: skip
    assert ok["status"] == {"phase": "One"}
    with pytest.raises(client.ApiException) as err:
        co.patch_namespaced_custom_object_status(
            G, V, "default", "tunedservices", "a",
            [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
             {"op": "replace", "path": "/status", "value": {"phase": "Two"}}],
            _content_type="application/json-patch+json",
        )  # fmt: skip
    assert err.value.status == 422
    assert co.get_namespaced_custom_object(G, V, "default", "tunedservices", "a")["status"] == {"phase": "One"}


def test_stale_resource_version_in_merge_patch_is_409(api_client: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api_client)
    a = co.create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("a"))
    co.patch_namespaced_custom_object(G, V, "default", "tunedservices", "a", {"spec": {"model": "n"}})
    with pytest.raises(client.ApiException) as err:
        co.patch_namespaced_custom_object(
            G, V, "default", "tunedservices", "a",
            {"metadata": {"resourceVersion": a["metadata"]["resourceVersion"]}, "spec": {"model": "o"}},
        )  # fmt: skip
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "Conflict"


def test_put_replaces_leases_with_resource_version_guard(api_client: client.ApiClient) -> None:
    coord = client.CoordinationV1Api(api_client)
    lease = coord.create_namespaced_lease(
        "default",
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="leader"),
            spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=5),
        ),
    )
    lease.spec.holder_identity = "b"
    replaced = coord.replace_namespaced_lease("leader", "default", lease)
    assert replaced.spec.holder_identity == "b"
    assert replaced.spec.lease_duration_seconds == 5
    assert int(replaced.metadata.resource_version) > int(lease.metadata.resource_version)
    lease.spec.holder_identity = "c"  # still carries the old resourceVersion
    with pytest.raises(client.ApiException) as err:
        coord.replace_namespaced_lease("leader", "default", lease)
    assert err.value.status == 409
    assert coord.read_namespaced_lease("leader", "default").spec.holder_identity == "b"


def test_put_on_status_only_changes_status(server: KubeAPIServer) -> None:
    base = f"{server.url}/apis/{G}/{V}/namespaces/default/tunedservices"
    created = httpx.post(base, json=_tsvc("a")).json()
    created["spec"] = {"model": "changed"}
    created["status"] = {"phase": "P"}
    r = httpx.put(f"{base}/a/status", json=created)
    assert r.status_code == 200
    assert r.json()["spec"] == {"model": "m"}
    assert r.json()["status"] == {"phase": "P"}
    assert httpx.put(f"{base}/missing", json=_tsvc("missing")).status_code == 404


def test_list_has_kind_api_version_and_label_selectors(api_client: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api_client)
    co.create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("a", {"tier": "gold", "env": "prod"}))
    co.create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("b", {"tier": "silver"}))
    co.create_namespaced_custom_object(G, V, "other", "tunedservices", _tsvc("c", {"tier": "gold"}))

    def names(**kw: str) -> list[str]:
        listed = co.list_cluster_custom_object(G, V, "tunedservices", **kw)
        assert listed["kind"] == "TunedServiceList"
        assert listed["apiVersion"] == f"{G}/{V}"
        assert all(i["kind"] == "TunedService" for i in listed["items"])
        return sorted(i["metadata"]["name"] for i in listed["items"])

    assert names() == ["a", "b", "c"]
    assert names(label_selector="tier=gold") == ["a", "c"]
    assert names(label_selector="tier==gold,env=prod") == ["a"]
    assert names(label_selector="tier!=gold") == ["b"]
    assert names(label_selector="tier in (gold, silver),!env") == ["b", "c"]
    assert names(label_selector="tier notin (gold)") == ["b"]
    assert names(label_selector="env") == ["a"]
    assert names(field_selector="metadata.namespace=other") == ["c"]
    namespaced = co.list_namespaced_custom_object(G, V, "default", "tunedservices", label_selector="tier=gold")
    assert [i["metadata"]["name"] for i in namespaced["items"]] == ["a"]


def test_selector_parsing_units() -> None:
    labels = {"a": "1", "b": "2"}
    assert label_selector_matches("", labels)
    assert label_selector_matches("a=1, b in (2,3)", labels)
    assert not label_selector_matches("a in (2,3)", labels)
    assert label_selector_matches("c notin (1)", labels)
    assert not label_selector_matches("!a", labels)
    assert field_selector_matches("metadata.name=x", {"metadata": {"name": "x"}})
    assert not field_selector_matches("metadata.name!=x", {"metadata": {"name": "x"}})


def test_delete_with_finalizers_marks_then_removes(api_client: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api_client)
    body = _tsvc("a")
    body["metadata"]["finalizers"] = ["shiftlight.dev/cleanup"]
    co.create_namespaced_custom_object(G, V, "default", "tunedservices", body)
    co.delete_namespaced_custom_object(G, V, "default", "tunedservices", "a")
    marked = co.get_namespaced_custom_object(G, V, "default", "tunedservices", "a")
    assert marked["metadata"]["deletionTimestamp"]
    co.patch_namespaced_custom_object(G, V, "default", "tunedservices", "a", {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as err:
        co.get_namespaced_custom_object(G, V, "default", "tunedservices", "a")
    assert err.value.status == 404
    assert json.loads(err.value.body)["message"] == 'tunedservices.shiftlight.dev "a" not found'


def test_watch_streams_changes_filtered_by_selector(server: KubeAPIServer) -> None:
    base = f"{server.url}/apis/{G}/{V}"
    httpx.post(f"{base}/namespaces/default/tunedservices", json=_tsvc("seen", {"w": "1"}))
    httpx.post(f"{base}/namespaces/default/tunedservices", json=_tsvc("hidden"))
    listed = httpx.get(f"{base}/tunedservices").json()
    events: list[dict[str, Any]] = []
    done = threading.Event()

    def watch() -> None:
        params = {"watch": "true", "labelSelector": "w=1", "resourceVersion": listed["metadata"]["resourceVersion"]}
        with httpx.stream("GET", f"{base}/tunedservices", params=params, timeout=30) as r:
            for line in r.iter_lines():
                if line.strip():
                    events.append(json.loads(line))
                    done.set()
                    return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    httpx.patch(
        f"{base}/namespaces/default/tunedservices/hidden",
        json={"spec": {"model": "x"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    httpx.patch(
        f"{base}/namespaces/default/tunedservices/seen",
        json={"spec": {"model": "y"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert done.wait(timeout=20)
    t.join(timeout=5)
    assert events[0]["type"] == "MODIFIED"
    assert events[0]["object"]["metadata"]["name"] == "seen"
    assert events[0]["object"]["spec"] == {"model": "y"}


def test_a_watch_opened_after_the_changes_replays_them_with_their_types(server: KubeAPIServer) -> None:
    """A watch from a resourceVersion replays what changed since then, as the API server does: an object that
    existed then comes back MODIFIED, one created since then ADDED (whenever the watch request arrives)."""
    base = f"{server.url}/apis/{G}/{V}"
    httpx.post(f"{base}/namespaces/default/tunedservices", json=_tsvc("seen", {"w": "1"}))
    since = httpx.get(f"{base}/tunedservices").json()["metadata"]["resourceVersion"]
    httpx.patch(
        f"{base}/namespaces/default/tunedservices/seen",
        json={"spec": {"model": "y"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    httpx.post(f"{base}/namespaces/default/tunedservices", json=_tsvc("new", {"w": "1"}))
    events: list[dict[str, Any]] = []
    params = {"watch": "true", "labelSelector": "w=1", "resourceVersion": since}
    with httpx.stream("GET", f"{base}/tunedservices", params=params, timeout=30) as r:
        for line in r.iter_lines():
            if line.strip():
                events.append(json.loads(line))
            if len(events) == 2:
                break
    assert sorted((e["type"], e["object"]["metadata"]["name"]) for e in events) == [
        ("ADDED", "new"),
        ("MODIFIED", "seen"),
    ]


def test_discovery_serves_crds_leases_deployments_httproutes_events(api_client: client.ApiClient) -> None:
    apis = client.ApisApi(api_client).get_api_versions()
    groups = {g.name for g in apis.groups}
    assert {"shiftlight.dev", "coordination.k8s.io", "apps", "gateway.networking.k8s.io"} <= groups
    sl = client.CustomObjectsApi(api_client).get_api_resources(G, V)
    by_name = {r.name: r for r in sl.resources}
    assert by_name["tunedservices"].kind == "TunedService"
    assert by_name["tunedservices"].namespaced is True
    assert "tunedservices/status" in by_name
    core = {r.name for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"namespaces", "events", "pods"} <= core


def test_without_gateway_httproutes_are_not_served(tmp_path: Path) -> None:
    with running_kube_api(KubeAPI(gateway=False)) as srv:
        r = httpx.get(f"{srv.url}/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes")
        assert r.status_code == 404
        groups = [g["name"] for g in httpx.get(f"{srv.url}/apis").json()["groups"]]
        assert "gateway.networking.k8s.io" not in groups


def test_tokens_identify_users_and_denials_answer_403(tmp_path: Path) -> None:
    api = KubeAPI(tokens={"t-alice": "alice", "t-bob": "bob"}, denials={("bob", "patch", "tunedservices/status")})
    with running_kube_api(api) as srv:
        alice = config.new_client_from_config(str(srv.write_kubeconfig(tmp_path / "a", user="alice", token="t-alice")))
        bob = config.new_client_from_config(str(srv.write_kubeconfig(tmp_path / "b", user="bob", token="t-bob")))
        review = client.AuthenticationV1Api(bob).create_self_subject_review(client.V1SelfSubjectReview())
        assert review.status.user_info.username == "bob"
        client.CustomObjectsApi(alice).create_namespaced_custom_object(G, V, "default", "tunedservices", _tsvc("a"))
        with pytest.raises(client.ApiException) as err:
            client.CustomObjectsApi(bob).patch_namespaced_custom_object_status(
                G, V, "default", "tunedservices", "a", {"status": {"phase": "X"}}
            )
        assert err.value.status == 403
        assert 'User "bob" cannot patch resource "tunedservices/status"' in json.loads(err.value.body)["message"]
        assert httpx.get(f"{srv.url}/apis/{G}/{V}/tunedservices").status_code == 401


def test_every_request_is_recorded_with_its_kubernetes_verb(tmp_path: Path) -> None:
    with running_kube_api(KubeAPI(tokens={"t-op": "op"})) as srv:
        api = config.new_client_from_config(str(srv.write_kubeconfig(tmp_path / "k", user="op", token="t-op")))
        co, coord = client.CustomObjectsApi(api), client.CoordinationV1Api(api)
        co.create_namespaced_custom_object(G, V, "prod", "tunedservices", _tsvc("a"))
        co.get_namespaced_custom_object(G, V, "prod", "tunedservices", "a")
        co.list_cluster_custom_object(G, V, "tunedservices")
        co.patch_namespaced_custom_object_status(G, V, "prod", "tunedservices", "a", {"status": {"phase": "x"}})
        lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}
        coord.create_namespaced_lease("ops", lease)
        coord.replace_namespaced_lease("l", "ops", coord.read_namespaced_lease("l", "ops"))
        co.delete_namespaced_custom_object(G, V, "prod", "tunedservices", "a")
        client.CoreV1Api(api).list_namespace()
        with httpx.stream(
            "GET",
            f"{srv.url}/apis/{G}/{V}/namespaces/prod/tunedservices",
            params={"watch": "true"},
            headers={"Authorization": "Bearer t-op"},
            timeout=5,
        ) as stream:
            assert stream.status_code == 200
        calls = list(srv.api.calls)
    assert calls == [
        APICall("op", "create", G, "tunedservices", "prod"),
        APICall("op", "get", G, "tunedservices", "prod"),
        APICall("op", "list", G, "tunedservices", None),
        APICall("op", "patch", G, "tunedservices/status", "prod"),
        APICall("op", "create", "coordination.k8s.io", "leases", "ops"),
        APICall("op", "get", "coordination.k8s.io", "leases", "ops"),
        APICall("op", "update", "coordination.k8s.io", "leases", "ops"),
        APICall("op", "delete", G, "tunedservices", "prod"),
        APICall("op", "list", "", "namespaces", None),
        APICall("op", "watch", G, "tunedservices", "prod"),
    ]


def test_a_reaction_is_tested_once_per_request_and_its_slice_still_counts(server: KubeAPIServer) -> None:
    """A long run must not slow down with its request log: each request is tested against a reaction's filter once
    (kmock's own dispatch ran every earlier request through every filter again), and a reaction that depends on
    earlier requests (a slice: the first two only) still sees them in order."""
    seen: list[Any] = []

    def tsvc_gets(request: Any) -> bool:
        seen.append(request)
        return request.method == "GET" and "/tunedservices/" in request.url.path

    path = f"/apis/{G}/{V}/namespaces/prod/tunedservices/a"
    server.api["get", path][:2] << StatusError(status=500, reason="InternalError", message="first two")
    server.api[tsvc_gets] << StatusError(status=429, reason="TooManyRequests", message="slow down")
    httpx.post(f"{server.url}/apis/{G}/{V}/namespaces/prod/tunedservices", json=_tsvc("a"))
    codes = [httpx.get(f"{server.url}{path}").status_code for _ in range(4)]
    for _ in range(40):
        httpx.get(f"{server.url}/apis/{G}/{V}/namespaces/prod/tunedservices")
    # the slice reaction, added first, is tried first: it answers the first two GETs, then the 429 takes over
    assert codes == [500, 500, 429, 429]
    # the filter was asked about each request once: the create, the two GETs the slice left, the 40 lists
    assert len({id(r) for r in seen}) == len(seen) == 1 + 2 + 40
