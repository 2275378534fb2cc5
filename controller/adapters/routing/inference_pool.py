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

import contextlib
import logging

from controller.adapters.kube.canary.manifest import OwnerRef
from controller.adapters.kube.client import ApiClient
from controller.adapters.kube.manifests import LABEL_MANAGED, MANAGER
from controller.adapters.kube.objects import KubeObjects
from controller.adapters.kube.pod_template import selector_matches
from controller.adapters.routing.pool_manifests import (
    JSON,
    POOL_GROUP,
    POOL_PLURAL,
    POOL_VERSION,
    candidate_name,
    candidate_pool_manifest,
    epp_deployment_clone,
    epp_selector,
    epp_service_clone,
    picker_service_name,
)
from controller.domain.observation import TargetRef
from controller.errors import InvalidInput, NotFound

log = logging.getLogger(__name__)


class InferencePools:
    """Creates and removes the candidate InferencePool (and its endpoint picker clone) next to a stable pool."""

    def __init__(self, api: ApiClient, *, owner: OwnerRef | None = None) -> None:
        self.objects = KubeObjects(api)
        self.owner = owner

    def read(self, target: TargetRef, name: str) -> JSON | None:
        try:
            what = f"inferencepool {target.namespace}/{name}"
            return self.objects.get(POOL_GROUP, POOL_VERSION, target.namespace, POOL_PLURAL, name, what=what)
        except NotFound:
            return None

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
        what = f"inferencepool {target.namespace}/{name}"
        if current is None:
            self.objects.create(POOL_GROUP, POOL_VERSION, target.namespace, POOL_PLURAL, body, what=what)
            log.info("%s: created candidate InferencePool %s", target, name)
        elif current.get("spec") != body["spec"]:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self.objects.replace(POOL_GROUP, POOL_VERSION, target.namespace, POOL_PLURAL, name, body, what=what)
        return str(name)

    def _ensure_picker(self, target: TargetRef, stable: JSON) -> str | None:
        service_name = picker_service_name(stable)
        if service_name is None:
            return None
        clone_name = candidate_name(service_name, 63)
        try:
            self.objects.read_service(target.namespace, clone_name, what=f"service {target.namespace}/{clone_name}")
            return clone_name  # created before (a clone is never changed)
        except NotFound:
            pass
        where = f"service {target.namespace}/{service_name}"
        try:
            svc = self.objects.read_service(target.namespace, service_name, what=where)
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
        self.objects.create_deployment(
            target.namespace,
            deployment,
            exist_ok=True,  # created by an earlier attempt whose Service create failed; kept
            what=f"deployment {target.namespace}/{deployment['metadata']['name']}",
        )
        self.objects.create_service(target.namespace, service, what=f"service {target.namespace}/{clone_name}")
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
        listed = self.objects.list_deployments(target.namespace, what=f"deployments in {target.namespace}")
        found = []
        for body in listed:  # the Service selects pod labels
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
            with contextlib.suppress(NotFound):
                self.objects.delete_service(target.namespace, service, what=f"service {target.namespace}/{service}")
        for deployment in self._clone_deployments(target) if services else []:
            with contextlib.suppress(NotFound):
                what = f"deployment {target.namespace}/{deployment}"
                self.objects.delete_deployment(target.namespace, deployment, what=what)
        if current is None:
            return
        try:
            what = f"inferencepool {target.namespace}/{name}"
            self.objects.delete(POOL_GROUP, POOL_VERSION, target.namespace, POOL_PLURAL, name, what=what)
            log.info("%s: removed candidate InferencePool %s", target, name)
        except NotFound:
            pass

    def _clone_deployments(self, target: TargetRef) -> list[str]:
        selector = {**epp_selector(target), LABEL_MANAGED: MANAGER}
        listed = self.objects.list_deployments(
            target.namespace,
            label_selector=",".join(f"{k}={v}" for k, v in sorted(selector.items())),
            what=f"deployments in {target.namespace}",
        )
        return [str(d["metadata"]["name"]) for d in listed if d.get("metadata")]


__all__ = ["InferencePools"]
