"""Candidate InferencePools (Gateway API Inference Extension, ``inference.networking.k8s.io/v1``).

When the stable backendRef of the TunedService's HTTPRoute is an ``InferencePool``, traffic is split between two
pools in the same rule (core conformance of the API): the user's pool, which keeps its name and selector, and a
candidate pool ``<pool>-candidate`` that Shiftlight creates next to it and removes on promote or rollback.

* The candidate pool has the stable pool's spec (target ports, app protocol, failure mode) with
  ``spec.selector.matchLabels`` set to the candidate Deployment's own selector
  (``shiftlight.dev/tuned-service: <name>``, ``shiftlight.dev/variant: candidate``): it selects the candidate pods
  and nothing else. The stable pool's selector is added to the selectors candidate and trial pods are kept out of
  (:func:`controller.adapters.kube.pod_template.hygienic_labels`), so it does not select them.
* Endpoint picker: an EPP serves a single pool, so a stable pool with an ``endpointPickerRef`` to a Service gets a
  clone of its picker for the candidate: the Deployment behind that Service (found by the Service's selector) and
  the Service itself, both ``<name>-candidate``, with the EPP's ``--pool-name`` flag pointing at the candidate pool
  and pod labels that neither the stable picker's Service nor its Deployment selects. Every other flag, the
  ServiceAccount, config files and resources stay the user's. A stable pool without ``endpointPickerRef`` gets a
  candidate pool without one (the Gateway implementation picks endpoints itself). A picker Shiftlight cannot
  clone (a reference that is not a core Service, no single Deployment behind the Service, no ``--pool-name``
  flag) is refused with :class:`InvalidInput` naming the object and field; nothing is created.
* The candidate pool and the picker clone are owned by the TunedService, so Kubernetes collects anything left
  behind when it is deleted.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.adapters.kube.canary.manifest import OwnerRef
from controller.adapters.kube.client import kube_errors
from controller.adapters.kube.manifests import LABEL_MANAGED, LABEL_TARGET, LABEL_VARIANT, MANAGER
from controller.adapters.kube.pod_template import hygienic_labels, selector_matches
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput, NotFound

log = logging.getLogger(__name__)

JSON = dict[str, Any]

POOL_GROUP, POOL_VERSION, POOL_PLURAL, POOL_KIND = (
    "inference.networking.k8s.io",
    "v1",
    "inferencepools",
    "InferencePool",
)
CANDIDATE = "candidate"
LABEL_COMPONENT = "shiftlight.dev/component"
EPP_COMPONENT = "endpoint-picker"
POOL_NAME_FLAGS = ("--pool-name", "-pool-name")
"""The EPP's flag naming its pool (Go's flag package accepts one or two dashes, ``-f v`` and ``-f=v``)."""

#: Fields the API server sets on a stored object; a clone starts without them.
_SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")
_SERVER_ANNOTATIONS = ("deployment.kubernetes.io/revision", "kubectl.kubernetes.io/last-applied-configuration")
_SERVICE_ASSIGNED = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort")


# ----- pure helpers ---------------------------------------------------------------------------------------


def is_pool_ref(ref: Mapping[str, Any]) -> bool:
    """Whether an HTTPRoute backendRef points at an InferencePool."""
    return ref.get("group") == POOL_GROUP and ref.get("kind") == POOL_KIND


def candidate_name(name: str, limit: int = 253) -> str:
    """``<name>-candidate``, its base shortened to fit ``limit`` characters."""
    suffix = f"-{CANDIDATE}"
    return name[: limit - len(suffix)].rstrip("-.") + suffix


def stable_pool_name(route: Mapping[str, Any], stable_backend: str) -> str | None:
    """The stable InferencePool of ``route``: the InferencePool backendRef named ``stable_backend``, else the one
    InferencePool the route references (besides its ``-candidate``); None when the stable backend is not a pool."""
    refs = [r for rule in (route.get("spec") or {}).get("rules") or [] for r in rule.get("backendRefs") or []]
    named = [r for r in refs if r.get("name") == stable_backend]
    if named:
        return stable_backend if is_pool_ref(named[0]) else None
    pools = {str(r.get("name")) for r in refs if is_pool_ref(r)}
    stables = {p for p in pools if not any(candidate_name(q) == p for q in pools)}
    return next(iter(stables)) if len(stables) == 1 else None


def candidate_pool_selector(target: TargetRef) -> dict[str, str]:
    """The candidate pool's ``matchLabels``: the candidate Deployment's selector (its pods and nothing else)."""
    return {LABEL_TARGET: target.name, LABEL_VARIANT: CANDIDATE}


def owner_references(owner: OwnerRef | None) -> list[JSON]:
    if owner is None:
        return []
    return [
        {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
            "controller": owner.controller,
            "blockOwnerDeletion": owner.block_owner_deletion,
        }
    ]


def _metadata(target: TargetRef, name: str, owner: OwnerRef | None, **extra: Any) -> JSON:
    meta: JSON = {
        "name": name,
        "namespace": target.namespace,
        "labels": {LABEL_TARGET: target.name, LABEL_VARIANT: CANDIDATE, LABEL_MANAGED: MANAGER},
        **extra,
    }
    refs = owner_references(owner)
    if refs:
        meta["ownerReferences"] = refs
    return meta


def candidate_pool_manifest(
    stable: Mapping[str, Any], target: TargetRef, *, endpoint_picker: str | None, owner: OwnerRef | None = None
) -> JSON:
    """The candidate InferencePool (pure): ``stable``'s spec with the candidate's selector and, when the stable pool
    has an ``endpointPickerRef``, the same reference to the picker Service ``endpoint_picker``."""
    spec: JSON = copy.deepcopy(dict(stable.get("spec") or {}))
    spec["selector"] = {"matchLabels": candidate_pool_selector(target)}
    ref = spec.get("endpointPickerRef")
    if ref is not None:
        if endpoint_picker is None:
            raise InvalidInput(
                "the stable InferencePool has an endpoint picker but none was cloned for the candidate",
                source=f"inferencepool {target.namespace}/{stable['metadata']['name']}",
                field="spec.endpointPickerRef",
            )
        spec["endpointPickerRef"] = {**ref, "name": endpoint_picker}
    return {
        "apiVersion": f"{POOL_GROUP}/{POOL_VERSION}",
        "kind": POOL_KIND,
        "metadata": _metadata(target, candidate_name(str(stable["metadata"]["name"])), owner),
        "spec": spec,
    }


def picker_service_name(pool: Mapping[str, Any]) -> str | None:
    """The Service the pool's ``endpointPickerRef`` names; None without one. A reference to anything but a core
    Service is refused (Shiftlight can only clone a picker behind a Service)."""
    ref = (pool.get("spec") or {}).get("endpointPickerRef")
    if ref is None:
        return None
    where = f"inferencepool {pool['metadata'].get('namespace', '')}/{pool['metadata']['name']}"
    if ref.get("group", "") != "" or ref.get("kind", "Service") != "Service":
        raise InvalidInput(
            f"the endpoint picker is a {ref.get('group', '')}/{ref.get('kind')}: Shiftlight clones an endpoint "
            "picker only behind a core Service",
            source=where,
            field="spec.endpointPickerRef.kind",
        )
    return str(ref["name"])


def _rewrite_pool_flag(argv: Sequence[str], pool: str) -> tuple[list[str], bool]:
    out, found, i = [], False, 0
    while i < len(argv):
        arg = str(argv[i])
        flag, eq, _ = arg.partition("=")
        if flag in POOL_NAME_FLAGS:
            found = True
            if eq:
                out.append(f"{flag}={pool}")
            else:
                out += [arg, pool]
                i += 1  # the old value
        else:
            out.append(arg)
        i += 1
    return out, found


def epp_selector(target: TargetRef) -> dict[str, str]:
    """The picker clone's pod selector: no variant label, so no candidate/stable Deployment or pool selects it."""
    return {LABEL_TARGET: target.name, LABEL_COMPONENT: EPP_COMPONENT}


def epp_deployment_clone(
    epp: Mapping[str, Any],
    target: TargetRef,
    *,
    pool: str,
    selectors: Sequence[Mapping[str, str]],
    owner: OwnerRef | None = None,
) -> JSON:
    """The candidate's endpoint picker (pure): the stable picker Deployment ``epp`` with ``--pool-name`` set to
    ``pool`` in every container that has it, pod labels out of ``selectors`` (the stable picker's Service and
    Deployment selectors) plus :func:`epp_selector`; everything else unchanged."""
    meta = epp.get("metadata") or {}
    where = f"deployment {meta.get('namespace', target.namespace)}/{meta.get('name')}"
    spec: JSON = copy.deepcopy(dict(epp.get("spec") or {}))
    template: JSON = spec.setdefault("template", {})
    pod_meta: JSON = template.setdefault("metadata", {})
    pod_meta["labels"] = {
        **hygienic_labels(pod_meta.get("labels") or {}, selectors, CANDIDATE),
        **epp_selector(target),
        LABEL_MANAGED: MANAGER,
    }
    found = False
    for container in (template.get("spec") or {}).get("containers") or []:
        for key in ("command", "args"):
            if container.get(key):
                container[key], hit = _rewrite_pool_flag(container[key], pool)
                found = found or hit
    if not found:
        raise InvalidInput(
            "the endpoint picker's containers have no --pool-name flag, so a clone cannot be pointed at the "
            "candidate InferencePool",
            source=where,
            field="--pool-name",
        )
    spec["selector"] = {"matchLabels": epp_selector(target)}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _SERVER_ANNOTATIONS}
    body_meta = _metadata(target, candidate_name(str(meta.get("name")), 63), owner)
    body_meta["labels"] = {**(meta.get("labels") or {}), **body_meta["labels"], LABEL_COMPONENT: EPP_COMPONENT}
    if annotations:
        body_meta["annotations"] = annotations
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": body_meta, "spec": spec}


def epp_service_clone(service: Mapping[str, Any], target: TargetRef, *, owner: OwnerRef | None = None) -> JSON:
    """The candidate picker's Service (pure): the stable picker Service's ports and type, selecting the clone."""
    meta = service.get("metadata") or {}
    spec = {k: copy.deepcopy(v) for k, v in (service.get("spec") or {}).items() if k not in _SERVICE_ASSIGNED}
    spec["selector"] = epp_selector(target)
    body_meta = _metadata(target, candidate_name(str(meta.get("name")), 63), owner)
    body_meta["labels"] = {**(meta.get("labels") or {}), **body_meta["labels"], LABEL_COMPONENT: EPP_COMPONENT}
    return {"apiVersion": "v1", "kind": "Service", "metadata": body_meta, "spec": spec}


# ----- the adapter ----------------------------------------------------------------------------------------


class InferencePools:
    """Creates and removes the candidate InferencePool (and its endpoint picker clone) next to a stable pool."""

    def __init__(self, api: client.ApiClient, *, owner: OwnerRef | None = None) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.owner = owner

    def read(self, target: TargetRef, name: str) -> JSON | None:
        try:
            with kube_errors(f"inferencepool {target.namespace}/{name}"):
                pool: JSON = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                    POOL_GROUP, POOL_VERSION, target.namespace, POOL_PLURAL, name
                )
        except NotFound:
            return None
        return pool

    def stable(self, target: TargetRef, name: str) -> JSON:
        pool = self.read(target, name)
        if pool is None:
            raise InvalidInput(
                f"the HTTPRoute's stable backend InferencePool {name!r} does not exist",
                source=f"inferencepool {target.namespace}/{name}",
                field="spec.rules[].backendRefs[].name",
            )
        return pool

    def selector(self, target: TargetRef, name: str) -> dict[str, str]:
        """The stable pool's ``matchLabels`` ({} when it does not exist)."""
        pool = self.read(target, name)
        return dict(((pool or {}).get("spec") or {}).get("selector", {}).get("matchLabels") or {})

    def ensure_candidate(self, target: TargetRef, stable_name: str) -> str:
        """Create (or bring up to date) the candidate pool of ``stable_name`` and its picker clone; its name."""
        stable = self.stable(target, stable_name)
        picker = self._ensure_picker(target, stable)
        body = candidate_pool_manifest(stable, target, endpoint_picker=picker, owner=self.owner)
        name = body["metadata"]["name"]
        current = self.read(target, name)
        with kube_errors(f"inferencepool {target.namespace}/{name}"):
            if current is None:
                self.custom.create_namespaced_custom_object(
                    POOL_GROUP, POOL_VERSION, target.namespace, POOL_PLURAL, body
                )
                log.info("%s: created candidate InferencePool %s", target, name)
            elif current.get("spec") != body["spec"]:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.custom.replace_namespaced_custom_object(
                    POOL_GROUP, POOL_VERSION, target.namespace, POOL_PLURAL, name, body
                )
        return str(name)

    def _ensure_picker(self, target: TargetRef, stable: JSON) -> str | None:
        service_name = picker_service_name(stable)
        if service_name is None:
            return None
        clone_name = candidate_name(service_name, 63)
        try:
            with kube_errors(f"service {target.namespace}/{clone_name}"):
                self.core.read_namespaced_service(clone_name, target.namespace)
            return clone_name  # created before (a clone is never changed)
        except NotFound:
            pass
        where = f"service {target.namespace}/{service_name}"
        try:
            with kube_errors(where):
                svc: JSON = self.core.api_client.sanitize_for_serialization(
                    self.core.read_namespaced_service(service_name, target.namespace)
                )
        except NotFound:
            raise InvalidInput(
                f"the endpoint picker Service {service_name!r} does not exist",
                source=f"inferencepool {target.namespace}/{stable['metadata']['name']}",
                field="spec.endpointPickerRef.name",
            ) from None
        epp = self._picker_deployment(target, svc)
        selectors = [svc.get("spec", {}).get("selector") or {}, (epp["spec"].get("selector") or {}).get("matchLabels")]
        deployment = epp_deployment_clone(
            epp,
            target,
            pool=candidate_name(str(stable["metadata"]["name"])),
            selectors=[s for s in selectors if s],
            owner=self.owner,
        )
        service = epp_service_clone(svc, target, owner=self.owner)
        with kube_errors(f"deployment {target.namespace}/{deployment['metadata']['name']}"):
            try:
                self.apps.create_namespaced_deployment(target.namespace, client.V1Deployment.model_validate(deployment))
            except ApiException as exc:
                if exc.status != 409:  # 409: created by an earlier attempt whose Service create failed; kept
                    raise
        with kube_errors(f"service {target.namespace}/{clone_name}"):
            self.core.create_namespaced_service(target.namespace, client.V1Service.model_validate(service))
        log.info("%s: cloned endpoint picker %s for the candidate pool", target, deployment["metadata"]["name"])
        return clone_name

    def _picker_deployment(self, target: TargetRef, svc: JSON) -> JSON:
        name = svc["metadata"]["name"]
        selector: dict[str, str] = dict(svc.get("spec", {}).get("selector") or {})
        where = f"service {target.namespace}/{name}"
        if not selector:
            raise InvalidInput(
                "the endpoint picker Service selects no pods, so its Deployment cannot be found",
                source=where,
                field="spec.selector",
            )
        with kube_errors(f"deployments in {target.namespace}"):
            listed = self.apps.list_namespaced_deployment(target.namespace)  # the Service selects pod labels
        found = []
        for item in listed.items:
            body: JSON = self.apps.api_client.sanitize_for_serialization(item)
            labels = ((body.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
            if (
                selector_matches(selector, labels)
                and (body["metadata"].get("labels") or {}).get(LABEL_MANAGED) != MANAGER
            ):
                found.append(body)
        if len(found) != 1:
            names = ", ".join(sorted(d["metadata"]["name"] for d in found)) or "none"
            raise InvalidInput(
                f"the endpoint picker Service must select the pods of exactly one Deployment (found: {names})",
                source=where,
                field="spec.selector",
            )
        return found[0]

    def remove_candidate(self, target: TargetRef, stable_name: str) -> None:
        """Delete the candidate pool of ``stable_name`` and its picker clone (each absent one is skipped). The
        clone goes first, so a retry after a failure still finds the pool that names it."""
        name = candidate_name(stable_name)
        current = self.read(target, name)
        ref = ((current or {}).get("spec") or {}).get("endpointPickerRef")
        if ref is not None:
            services = [str(ref["name"])]
        else:
            stable_picker = picker_service_name(self.read(target, stable_name) or {"metadata": {"name": stable_name}})
            services = [candidate_name(stable_picker, 63)] if stable_picker else []
        for service in services:
            try:
                with kube_errors(f"service {target.namespace}/{service}"):
                    self.core.delete_namespaced_service(service, target.namespace, _preload_content=False)
            except NotFound:
                pass
        for deployment in self._clone_deployments(target) if services else []:
            try:
                with kube_errors(f"deployment {target.namespace}/{deployment}"):
                    self.apps.delete_namespaced_deployment(deployment, target.namespace)
            except NotFound:
                pass
        if current is None:
            return
        try:
            with kube_errors(f"inferencepool {target.namespace}/{name}"):
                self.custom.delete_namespaced_custom_object(
                    POOL_GROUP, POOL_VERSION, target.namespace, POOL_PLURAL, name
                )
            log.info("%s: removed candidate InferencePool %s", target, name)
        except NotFound:
            pass

    def _clone_deployments(self, target: TargetRef) -> list[str]:
        selector = {**epp_selector(target), LABEL_MANAGED: MANAGER}
        with kube_errors(f"deployments in {target.namespace}"):
            listed = self.apps.list_namespaced_deployment(
                target.namespace, label_selector=",".join(f"{k}={v}" for k, v in sorted(selector.items()))
            )
        return [str(d.metadata.name) for d in listed.items if d.metadata is not None]


__all__ = [
    "POOL_GROUP",
    "POOL_KIND",
    "InferencePools",
    "candidate_name",
    "candidate_pool_manifest",
    "candidate_pool_selector",
    "epp_deployment_clone",
    "epp_selector",
    "epp_service_clone",
    "is_pool_ref",
    "picker_service_name",
    "stable_pool_name",
]
