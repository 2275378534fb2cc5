"""A production Deployment whose vLLM command Shiftlight cannot rewrite (a shell string) is refused before anything
is deployed: the TunedService gets ``Accepted=False`` and a warning Event naming the Deployment, the container and
the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.support.kube_operator import G, V, kubernetes_loop, tuned_service
from tests.support.paths import MANIFESTS

pytestmark = [pytest.mark.kube, pytest.mark.security]

SHELL = MANIFESTS / "shell-string.yaml"


def test_a_shell_string_deployment_gets_a_condition_and_nothing_is_deployed(
    api: client.ApiClient, operator_kubeconfig: Path, policy_dir: Path
) -> None:
    deployment = next(d for d in yaml.safe_load_all(SHELL.read_text()) if d and d["kind"] == "Deployment")
    deployment["metadata"] = {"name": "workhorse", "namespace": "prod"}
    client.AppsV1Api(api).create_namespaced_deployment("prod", client.V1Deployment.model_validate(deployment))
    ts = tuned_service(route=None)
    ts["spec"]["workload"]["container"] = "mistral-7b"
    client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, "prod", "tunedservices", ts)
    loop = kubernetes_loop(operator_kubeconfig, policy_dir)
    report = loop.cycle("prod", "workhorse")
    assert not report.acted
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse")
    accepted = {c["type"]: c for c in body["status"]["conditions"]}["Accepted"]
    assert accepted["status"] == "False"
    for part in ("deployment prod/workhorse", "container mistral-7b", "--max-num-batched-tokens"):
        assert part in accepted["message"]
    events = [e for e in client.CoreV1Api(api).list_namespaced_event("prod").items if e.type == "Warning"]
    assert events and all("--max-num-batched-tokens" in e.message for e in events), [
        (e.reason, e.message) for e in events
    ]
    assert [d.metadata.name for d in client.AppsV1Api(api).list_namespaced_deployment("prod").items] == ["workhorse"]
    assert client.CoreV1Api(api).list_namespaced_pod("prod").items == []
