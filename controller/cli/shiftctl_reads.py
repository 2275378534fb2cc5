"""shiftctl's connection and reads: the TunedService, its list, its Events and its Trial CRs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client

from controller.adapters.kube import kube_errors
from controller.crd import models as crd
from controller.errors import ShiftlightError

JSON = dict[str, Any]


@dataclass
class Conn:
    api: client.ApiClient
    namespace: str
    user: str | None
    kubeconfig: str | None
    context: str | None
    impersonate: str | None

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)


def get_body(conn: Conn, name: str) -> JSON:
    with kube_errors():  # the API server's message already names the object
        body: JSON = conn.custom.get_namespaced_custom_object(  # type: ignore[assignment]
            crd.GROUP, crd.VERSION, conn.namespace, crd.PLURAL_TUNED_SERVICE, name
        )
    return body


def list_bodies(conn: Conn, all_namespaces: bool) -> list[JSON]:
    with kube_errors(crd.PLURAL_TUNED_SERVICE):
        if all_namespaces:
            listed: JSON = conn.custom.list_cluster_custom_object(  # type: ignore[assignment]
                crd.GROUP, crd.VERSION, crd.PLURAL_TUNED_SERVICE
            )
        else:
            listed = conn.custom.list_namespaced_custom_object(  # type: ignore[assignment]
                crd.GROUP, crd.VERSION, conn.namespace, crd.PLURAL_TUNED_SERVICE
            )
    items: list[JSON] = listed.get("items", [])
    return sorted(items, key=lambda b: (b["metadata"].get("namespace", ""), b["metadata"]["name"]))


def events_for(conn: Conn, name: str) -> list[JSON]:
    try:
        with kube_errors("events"):
            listed = client.CoreV1Api(conn.api).list_namespaced_event(
                conn.namespace, field_selector=f"involvedObject.name={name}"
            )
    except ShiftlightError:
        return []  # events are context, not essential
    out = [e.to_dict() for e in listed.items]
    return sorted(out, key=lambda e: str(e.get("last_timestamp") or e.get("metadata", {}).get("creation_timestamp")))


def trial_crs(conn: Conn, name: str) -> list[JSON]:
    with kube_errors(crd.PLURAL_TRIAL):
        listed: JSON = conn.custom.list_namespaced_custom_object(  # type: ignore[assignment]
            crd.GROUP,
            crd.VERSION,
            conn.namespace,
            crd.PLURAL_TRIAL,
            label_selector=f"shiftlight.dev/tuned-service={name}",
        )
    return list(listed.get("items", []))


__all__ = ["Conn", "events_for", "get_body", "list_bodies", "trial_crs"]
