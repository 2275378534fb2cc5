"""Creating a user's manifests (as ``kubectl apply`` would) on the fake Kubernetes API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from controller.adapters.routing.pool_manifests import POOL_GROUP

#: (group, version, plural) of the custom resources a user's stack holds.
CUSTOM = {
    "InferencePool": (POOL_GROUP, "v1", "inferencepools"),
    "HTTPRoute": ("gateway.networking.k8s.io", "v1", "httproutes"),
}


def apply_manifests(api: client.ApiClient, docs: Sequence[Mapping[str, Any]], namespace: str = "prod") -> None:
    """Create each Deployment, Service, ConfigMap, InferencePool and HTTPRoute of ``docs`` in ``namespace``."""
    apps, core, custom = client.AppsV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
    for doc in docs:
        kind = doc["kind"]
        if kind == "Deployment":
            apps.create_namespaced_deployment(namespace, client.V1Deployment.model_validate(doc))
        elif kind == "Service":
            core.create_namespaced_service(namespace, client.V1Service.model_validate(doc))
        elif kind == "ConfigMap":
            core.create_namespaced_config_map(namespace, client.V1ConfigMap.model_validate(doc))
        elif kind in CUSTOM:
            group, version, plural = CUSTOM[kind]
            custom.create_namespaced_custom_object(group, version, namespace, plural, dict(doc))
