"""Candidate InferencePool manifests, built offline from the stable pool and its endpoint picker (the objects
:class:`controller.adapters.routing.inference_pool.InferencePools` creates; the rules are in its module's text)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from controller.adapters.kube.canary.manifest import OwnerRef
from controller.adapters.kube.manifests import LABEL_MANAGED, LABEL_TARGET, LABEL_VARIANT, MANAGER
from controller.adapters.kube.pod_template import hygienic_labels
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput

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


__all__ = [
    "EPP_COMPONENT",
    "LABEL_COMPONENT",
    "POOL_GROUP",
    "POOL_KIND",
    "POOL_PLURAL",
    "POOL_VERSION",
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
