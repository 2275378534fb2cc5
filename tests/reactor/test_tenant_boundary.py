"""The tenant boundary, tried as a hostile tenant would: someone who may create a ConfigMap and a TunedService in
their own namespace, and nothing else.

A tenant's policy that names an LLM endpoint, a model, an API-key file or env var, or a preset that is a path, is
refused: the TunedService gets ``Accepted=False`` and a warning Event naming the field, what was stored in its
status stays, and nothing is sent anywhere (a local receiver standing in for the tenant's server gets nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controller.advisor.endpoints import AdvisorEndpoint
from controller.errors import InvalidInput
from controller.reactor.loop import ControlLoop
from controller.reactor.policy_source import preset_path
from controller.reactor.settings import OperatorSettings
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import REPO, G, V, kubernetes_loop, tuned_service

pytestmark = [pytest.mark.kube, pytest.mark.security]


@dataclass
class Receiver:
    """A loopback HTTP server that records every request it gets (the tenant's own server)."""

    url: str
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got: list[tuple[str, str, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            got.append((self.command, self.path, dict(self.headers)))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST = _record

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Receiver(url=f"http://127.0.0.1:{server.server_address[1]}/v1", requests=got)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    """Stands in for the operator Pod's ServiceAccount token: what the hostile policy wants sent to its server."""
    path = tmp_path / "serviceaccount-token"
    path.write_text("operator-cluster-wide-token\n")
    return path


@pytest.fixture
def loop(operator_kubeconfig: Path, policy_dir: Path) -> ControlLoop:
    admin_advisor = AdvisorEndpoint(name="default", base_url="http://127.0.0.1:9/v1", model="admins-model")
    return kubernetes_loop(operator_kubeconfig, policy_dir, llm_advisors=(admin_advisor,))


#: What a tenant's stored status already holds: it must survive the refusal.
STORED_STATUS: dict[str, Any] = {
    "phase": "Observing",
    "active_config": {"speculative_method": "mtp", "num_speculative_tokens": 1},
    "history": ["promoted mtp k=1 after 3 steps"],
}


def hostile_policy(llm: dict[str, Any]) -> str:
    policy = yaml.safe_load((REPO / "policies/v1/hybrid-mtp-workstation.yaml").read_text())
    policy["llm"] = llm
    return yaml.safe_dump(policy)


def create_tenant_objects(api: client.ApiClient, policy_text: str, *, preset: str | None = None) -> None:
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ts = tuned_service(route=None)
    if preset is None:
        core.create_namespaced_config_map(
            "prod", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tuning"), data={"policy.yaml": policy_text})
        )
        ts["spec"]["policy"] = {"configMapRef": {"name": "tuning", "key": "policy.yaml"}}
    else:
        ts["spec"]["policy"] = {"preset": preset}
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    body = co.get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    co.patch_namespaced_custom_object_status(
        G,
        V,
        "prod",
        "tunedservices",
        "workhorse",
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": body["metadata"]["resourceVersion"]},
            {"op": "add", "path": "/status", "value": STORED_STATUS},
        ],
        _content_type="application/json-patch+json",
    )


def refusal(api: client.ApiClient) -> tuple[dict[str, Any], dict[str, Any], list[client.CoreV1Event]]:
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    conditions = {c["type"]: c for c in body["status"]["conditions"]}
    events = [e for e in client.CoreV1Api(api).list_namespaced_event("prod").items if e.type == "Warning"]
    return body["status"], conditions, events


@pytest.mark.parametrize(
    ("field_name", "llm"),
    [
        ("llm.base_url", {"enabled": True, "base_url": "RECEIVER", "model": "m", "api_key_file": "TOKEN"}),
        ("llm.api_key_file", {"enabled": True, "api_key_file": "TOKEN"}),
        ("llm.base_url", {"enabled": True, "base_url": "RECEIVER"}),
        ("llm.model", {"enabled": True, "model": "tenants-own"}),
        ("llm.api_key_env", {"enabled": True, "api_key_env": "KUBERNETES_SERVICE_HOST"}),
    ],
)
def test_a_tenant_policy_that_names_an_endpoint_or_a_key_is_refused_and_nothing_is_sent(
    kube: KubeAPIServer,
    api: client.ApiClient,
    loop: ControlLoop,
    receiver: Receiver,
    token_file: Path,
    field_name: str,
    llm: dict[str, Any],
) -> None:
    aimed = {k: receiver.url if v == "RECEIVER" else str(token_file) if v == "TOKEN" else v for k, v in llm.items()}
    create_tenant_objects(api, hostile_policy(aimed))
    for _ in range(2):  # a second cycle refuses again and still sends nothing
        report = loop.cycle("prod", "workhorse")
        assert not report.acted
    assert receiver.requests == []
    status, conditions, events = refusal(api)
    assert conditions["Accepted"]["status"] == "False" and conditions["Accepted"]["reason"] == "InvalidPolicy"
    assert conditions["Ready"]["status"] == "False"
    assert field_name in conditions["Accepted"]["message"]
    assert "configmap prod/tuning" in conditions["Accepted"]["message"]
    assert {e.reason for e in events} == {"InvalidPolicy"} and all(field_name in e.message for e in events)
    assert "operator-cluster-wide-token" not in repr(kube.api.calls) + repr(status)
    for key, value in STORED_STATUS.items():  # nothing already stored is lost
        assert status[key] == value


@pytest.mark.parametrize(
    "preset",
    ["../../../var/run/secrets/kubernetes.io/serviceaccount/token", "/etc/passwd", "e2e/../e2e", "E2E", "e2e.yaml"],
)
def test_a_preset_that_is_a_path_is_refused(api: client.ApiClient, loop: ControlLoop, preset: str) -> None:
    create_tenant_objects(api, "", preset=preset)
    report = loop.cycle("prod", "workhorse")
    assert not report.acted
    _, conditions, events = refusal(api)
    assert conditions["Accepted"]["status"] == "False"
    assert conditions["Accepted"]["reason"] in {"InvalidSpec", "InvalidPolicy"}  # the CRD schema or the loader
    assert "spec.policy.preset" in conditions["Accepted"]["message"] or "preset" in conditions["Accepted"]["message"]
    assert events and all(e.reason == conditions["Accepted"]["reason"] for e in events)


def test_an_advisor_the_admin_does_not_offer_is_refused(
    api: client.ApiClient, loop: ControlLoop, receiver: Receiver
) -> None:
    create_tenant_objects(api, hostile_policy({"enabled": True, "advisor": "tenants-own"}))
    loop.cycle("prod", "workhorse")
    _, conditions, _ = refusal(api)
    assert conditions["Accepted"]["reason"] == "InvalidPolicy" and "llm.advisor" in conditions["Accepted"]["message"]
    assert receiver.requests == []


def test_preset_names_resolve_inside_the_policy_directory_only(tmp_path: Path) -> None:
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "team-a.yaml").write_text("version: 1\n")
    outside = tmp_path / "secret.yaml"
    outside.write_text("version: 1\n")
    (presets / "escape.yaml").symlink_to(outside)
    settings = replace(OperatorSettings(), policy_dir=presets)
    assert preset_path(settings, "team-a") == (presets / "team-a.yaml").resolve()
    for bad in ("../secret", "escape", "/tmp/x", "team-a/../team-a", "", "Team-A", "missing"):
        with pytest.raises(InvalidInput) as err:
            preset_path(settings, bad)
        assert err.value.field == "spec.policy.preset"
