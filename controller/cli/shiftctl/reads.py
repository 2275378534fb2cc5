"""shiftctl's connection and reads: the kubeconfig context, the caller's identity, the TunedService (and its parsed
status), its list, its Events and its Trial CRs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client, config

from controller.adapters.kube import KubeForbidden, KubeUnauthorized, kube_errors, load_api_client
from controller.cli.shiftctl import render as render
from controller.crd import models as crd
from controller.domain.status import TargetStatus
from controller.errors import InvalidInput, NotFound, ShiftlightError

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


def _context_info(kubeconfig: str | None, context: str | None) -> tuple[str | None, str | None]:
    """(namespace, user) of the kubeconfig context in use, when there is a kubeconfig."""
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, TypeError):
        return None, None
    chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
    ctx = (chosen or {}).get("context") or {}
    return ctx.get("namespace"), ctx.get("user")


def connect(kubeconfig: str | None, context: str | None, namespace: str | None, as_user: str | None = None) -> Conn:
    api = load_api_client(kubeconfig, context)
    if as_user:
        api.set_default_header("Impersonate-User", as_user)  # type: ignore[no-untyped-call]
    ctx_ns, ctx_user = _context_info(kubeconfig, context)
    return Conn(api, namespace or ctx_ns or "default", ctx_user, kubeconfig, context, as_user)


def whoami(conn: Conn) -> str:
    """The caller's identity: ``--as``, else the API server's SelfSubjectReview, else the kubeconfig user."""
    if conn.impersonate:
        return conn.impersonate
    try:
        with kube_errors("selfsubjectreview"):
            review = client.AuthenticationV1Api(conn.api).create_self_subject_review(client.V1SelfSubjectReview())
        user = review.status.user_info.username if review.status and review.status.user_info else None
        if user:
            return str(user)
    except (NotFound, KubeForbidden, KubeUnauthorized, ShiftlightError):
        pass
    return conn.user or "unknown"


def get_body(conn: Conn, name: str) -> JSON:
    with kube_errors():  # the API server's message already names the object
        body: JSON = conn.custom.get_namespaced_custom_object(  # type: ignore[assignment]
            crd.GROUP, crd.VERSION, conn.namespace, crd.PLURAL_TUNED_SERVICE, name
        )
    return body


def status_of(body: JSON) -> TargetStatus:
    """The status of a TunedService body, parsed; a body that does not parse is invalid input."""
    _spec, status, error = render.parsed(body)
    if status is None:
        raise InvalidInput(error)
    return status


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


__all__ = ["Conn", "connect", "events_for", "get_body", "list_bodies", "status_of", "trial_crs", "whoami"]
