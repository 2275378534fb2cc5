"""An operator started for some namespaces (`shiftlight operator --namespaced -n prod`, the chart's
``watchNamespaces``) reconciles the TunedServices there, reads a policy from a ConfigMap there, never touches
another namespace and never lists or watches anything across all namespaces (a namespaced install grants no
such right)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from kubernetes import client

from controller.reactor.settings import OperatorSettings
from controller.reactor.simulator_backend import SimulatorBackend
from tests.support.kube_api import KubeAPIServer
from tests.support.kube_operator import OPERATOR_USER, G, V, operator, tuned_service, wait_for

pytestmark = pytest.mark.kube

CLUSTER_SCOPED = {"customresourcedefinitions", "subjectaccessreviews", "namespaces", "selfsubjectreviews"}


def test_namespaced_operator_stays_in_its_namespaces(
    kube: KubeAPIServer,
    api: client.ApiClient,
    operator_api: client.ApiClient,
    policy_dir: Path,
    settings_for: Callable[[str], OperatorSettings],
) -> None:
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    policy_text = (policy_dir / "e2e.yaml").read_text()
    core.create_namespaced_config_map(
        "prod", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="tuning"), data={"policy.yaml": policy_text})
    )
    watched = tuned_service(route=None)
    watched["spec"]["policy"] = {"configMapRef": {"name": "tuning", "key": "policy.yaml"}}
    co.create_namespaced_custom_object(G, V, "prod", "tunedservices", watched)
    elsewhere = tuned_service(route=None)
    elsewhere["metadata"]["namespace"] = "staging"
    co.create_namespaced_custom_object(G, V, "staging", "tunedservices", elsewhere)

    settings = replace(settings_for("replica-a"), all_namespaces=False, namespaces=("prod",))
    with operator(settings, operator_api, backend=SimulatorBackend(settings, operator_api)) as replica:
        wait_for(
            "a status in prod",
            lambda: co.get_namespaced_custom_object(G, V, "prod", "tunedservices", "workhorse").get("status"),
        )
        wait_for("some cycles", lambda: len(replica.loop.durations) >= 3)

    assert "status" not in co.get_namespaced_custom_object(G, V, "staging", "tunedservices", "workhorse")
    ours = [c for c in kube.api.calls if c.user == OPERATOR_USER]
    assert ("get", "", "configmaps", "prod") in {(c.verb, c.group, c.resource, c.namespace) for c in ours}
    assert {c.namespace for c in ours if c.namespace is not None} <= {"prod", "shiftlight"}
    across = sorted({(c.verb, c.resource) for c in ours if c.namespace is None and c.resource not in CLUSTER_SCOPED})
    assert across == [], "a namespaced operator lists or watches nothing across all namespaces"
