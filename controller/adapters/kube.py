"""Kubernetes adapters on the official ``kubernetes`` client: the Cluster port and Events.

* :class:`KubeCluster` (Cluster): one Deployment per variant (``<target>-stable`` / ``<target>-candidate``) whose
  pods are the production Deployment's own with only the tuned flags replaced (:mod:`controller.adapters.vllm_pod`;
  a bare ``vllm serve MODEL`` without one), one Service per variant, replica counts, promotion, readiness from
  Deployment status, and Kubernetes Events carrying each action's reason.
* :class:`KubeEvents`: Kubernetes Events about a TunedService.

The API client and error translation live in :mod:`controller.adapters.kube_client`, the manifests in
:mod:`controller.adapters.kube_manifests`, canary trial Pods (:class:`KubernetesLauncher`) in
:mod:`controller.adapters.kube_trial_pods`; all are importable from here too.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.adapters.kube_client import (
    KubeForbidden,
    KubeUnauthorized,
    KubeUnavailable,
    api_message,
    kube_errors,
    load_api_client,
    translate,
)
from controller.adapters.kube_manifests import (
    ANNOTATION_CONFIG_JSON,
    JSON,
    LABEL_TARGET,
    LABEL_VARIANT,
    TS_GROUP,
    TS_PLURAL,
    TS_VERSION,
    deployment_manifest,
    engine_container,
    event_manifest,
    service_manifest,
    variant_name,
)
from controller.adapters.kube_trial_pods import KubernetesLauncher
from controller.adapters.memory import check_replicas, check_variant
from controller.adapters.vllm_pod import PodSource, config_map_name, engine_invocation
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.errors import NotFound, ShiftlightError

log = logging.getLogger(__name__)


#: Events remembered for aggregation, as client-go's recorder does (its ``maxLruCacheEntries``).
EVENT_CACHE_ENTRIES = 4096


@dataclass
class _Seen:
    name: str
    count: int


class KubeEvents:
    """Writes Kubernetes Events about a TunedService (each action's reason), aggregated as client-go's recorder
    does: an Event that repeats one already written (same object, type, reason and message) raises that Event's
    ``count`` and ``lastTimestamp`` instead of creating another. The Events remembered are bounded
    (:data:`EVENT_CACHE_ENTRIES`, least recently seen first out) and :meth:`forget` drops a deleted object's."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_entries: int = EVENT_CACHE_ENTRIES,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._uids: dict[tuple[str, str], str] = {}
        self._seen: OrderedDict[tuple[str, ...], _Seen] = OrderedDict()
        self._now = now
        self.max_entries = max_entries

    def _uid(self, target: TargetRef) -> str | None:
        key = (target.namespace, target.name)
        if key not in self._uids:
            try:
                body: JSON = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                    TS_GROUP, TS_VERSION, target.namespace, TS_PLURAL, target.name
                )
            except (ApiException, urllib3.exceptions.HTTPError):
                return None
            self._uids[key] = str(body.get("metadata", {}).get("uid", ""))
        return self._uids[key] or None

    def record(self, target: TargetRef, reason: str, message: str, *, warning: bool = False) -> None:
        now = self._now()
        uid = self._uid(target)
        body = event_manifest(target, reason=reason, message=message, warning=warning, uid=uid, now=now)
        key = (target.namespace, target.name, uid or "", body["type"], body["reason"], body["message"])
        try:
            seen = self._seen.get(key)
            if seen is not None and self._repeat(target.namespace, seen, body["lastTimestamp"]):
                self._seen.move_to_end(key)
                return
            with kube_errors(f"event {target}"):
                created = self.core.create_namespaced_event(target.namespace, client.CoreV1Event.model_validate(body))
            name = getattr(getattr(created, "metadata", None), "name", None)
            if name:
                self._seen[key] = _Seen(str(name), 1)
                while len(self._seen) > self.max_entries:
                    self._seen.popitem(last=False)
        except ShiftlightError as exc:  # an Event is best effort: never fail the cycle for it
            log.warning("could not record event %s on %s: %s", reason, target, exc)

    def _repeat(self, namespace: str, seen: _Seen, stamp: str) -> bool:
        """Count one more occurrence on the Event already written; False when it is gone (Events expire)."""
        patch = {"count": seen.count + 1, "lastTimestamp": stamp}
        try:
            with kube_errors(f"event {namespace}/{seen.name}"):
                self.core.patch_namespaced_event(seen.name, namespace, patch)
        except NotFound:
            return False
        seen.count += 1
        return True

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is remembered about ``namespace/name`` (a deleted TunedService)."""
        self._uids.pop((namespace, name), None)
        for key in [k for k in self._seen if k[0] == namespace and k[1] == name]:
            del self._seen[key]

    def remembered(self) -> int:
        """How many objects and Events this writer remembers (for tests and the scale bench)."""
        return len(self._uids) + len(self._seen)

    def held(self) -> set[tuple[str, str]]:
        """The objects (namespace, name) this writer remembers anything about."""
        return set(self._uids) | {(k[0], k[1]) for k in self._seen}


class KubeCluster:
    """Cluster port on Deployments: ``<target>-stable`` and ``<target>-candidate`` with rendered vLLM args."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        image: str = "vllm/vllm-openai:latest",
        port: int = 8000,
        template_deployment: str | None = None,
        candidate_service: str | None = None,
        events: KubeEvents | None = None,
        container: str = "vllm",
        served_model_name: str | None = None,
        stable_service: str | None = None,
        selectors: Sequence[Mapping[str, str]] = (),
    ) -> None:
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.image = image
        self.port = port
        self.template_deployment = template_deployment
        self.candidate_service = candidate_service
        self.container = container
        self.served_model_name = served_model_name
        self.stable_service = stable_service
        self.selectors = tuple(dict(s) for s in selectors)
        """Label selectors of the user's routers and pools, besides the template Deployment's and the stable
        Service's, that candidate pods must stay out of."""
        self.events = events or KubeEvents(api)
        self.on_promote: list[Callable[[TargetRef], None]] = []
        """Called after the stable Deployment took the new config and before the candidate is retired
        (the router moves all traffic back to stable here)."""

    def _get(self, target: TargetRef, name: str) -> JSON | None:
        try:
            with kube_errors(f"deployment {target.namespace}/{name}"):
                obj = self.apps.read_namespaced_deployment(name, target.namespace)
        except NotFound:
            return None
        result: JSON = self.apps.api_client.sanitize_for_serialization(obj)
        return result

    def pod_source(self, target: TargetRef) -> PodSource | None:
        """The user's pod template (from the template Deployment), with the ConfigMap its ``--config`` file comes
        from and the selectors (the Deployment's, the stable Service's, ``selectors``) candidates must not match."""
        if not self.template_deployment:
            return None
        prod = self._get(target, self.template_deployment)
        if prod is None:
            return None
        spec = prod.get("spec") or {}
        selectors: list[Mapping[str, str]] = [(spec.get("selector") or {}).get("matchLabels") or {}]
        if self.stable_service:
            try:
                with kube_errors(f"service {target.namespace}/{self.stable_service}"):
                    svc = self.core.read_namespaced_service(self.stable_service, target.namespace)
                selectors.append(dict((svc.spec.selector if svc.spec else None) or {}))
            except NotFound:
                pass
        source = PodSource(
            template=spec.get("template") or {},
            container=self.container,
            selectors=tuple(s for s in (*selectors, *self.selectors) if s),
            where=f"deployment {target.namespace}/{self.template_deployment}",
        )
        name = config_map_name(source)
        if name:
            try:
                with kube_errors(f"configmap {target.namespace}/{name}"):
                    cm = self.core.read_namespaced_config_map(name, target.namespace)
                source = replace(source, config_maps={name: dict(cm.data or {})})
            except NotFound:
                pass  # the derivation refuses a --config file it cannot read
        return source

    def check_template(self, target: TargetRef) -> None:
        """Refuse (:class:`InvalidInput`, naming the Deployment, container and flag) a production pod template
        whose vLLM invocation Shiftlight cannot rewrite (a shell-string command, an unknown wrapper, an unreadable
        ``--config`` file), before anything is deployed."""
        source = self.pod_source(target)
        if source is not None:
            engine_invocation(source, fallback_model=target.model, port=self.port)

    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        check_variant(variant)
        check_replicas(replicas)
        body = deployment_manifest(
            target,
            variant,
            config,
            replicas,
            image=self.image,
            port=self.port,
            source=self.pod_source(target),
            served_model_name=self.served_model_name,
        )
        name = body["metadata"]["name"]
        self._upsert(target, name, body, self._get(target, name), what=f"deploy {target.namespace}/{name}")
        if variant == "candidate" and self.candidate_service:
            self._ensure_service(target, variant, self.candidate_service)
        log.info("%s: deployed %s (%s) x%d", target, name, config.label(), replicas)

    def _upsert(self, target: TargetRef, name: str, body: JSON, current: JSON | None, *, what: str) -> None:
        """Create the Deployment ``body``, or replace ``current`` with it (guarded by its resourceVersion)."""
        with kube_errors(what):
            if current is None:
                self.apps.create_namespaced_deployment(target.namespace, client.V1Deployment.model_validate(body))
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.apps.replace_namespaced_deployment(
                    name, target.namespace, client.V1Deployment.model_validate(body)
                )

    def _ensure_service(self, target: TargetRef, variant: str, name: str) -> None:
        try:
            with kube_errors(f"service {target.namespace}/{name}"):
                self.core.read_namespaced_service(name, target.namespace)
            return
        except NotFound:
            pass
        with kube_errors(f"service {target.namespace}/{name}"):
            self.core.create_namespaced_service(
                target.namespace,
                client.V1Service.model_validate(service_manifest(target, variant, name=name, port=self.port)),
            )

    def scale(self, target: TargetRef, variant: str, replicas: int) -> None:
        check_variant(variant)
        check_replicas(replicas)
        name = variant_name(target, variant)
        with kube_errors(f"scale {target.namespace}/{name}"):
            self.apps.patch_namespaced_deployment(name, target.namespace, {"spec": {"replicas": replicas}})

    def replicas(self, target: TargetRef, variant: str) -> int:
        current = self._get(target, variant_name(target, check_variant(variant)))
        return int(current.get("spec", {}).get("replicas") or 0) if current else 0

    def retire(self, target: TargetRef, variant: str) -> None:
        name = variant_name(target, check_variant(variant))
        try:
            with kube_errors(f"retire {target.namespace}/{name}"):
                self.apps.delete_namespaced_deployment(name, target.namespace)
        except NotFound:
            pass  # already gone

    def promote(self, target: TargetRef) -> None:
        """Roll the stable Deployment to the candidate's pod template (surge, no unavailability); retire the
        candidate."""
        candidate = self._get(target, variant_name(target, "candidate"))
        if candidate is None:
            raise NotFound(f"{target}: no candidate deployment to promote")
        stable_name = variant_name(target, "stable")
        stable = self._get(target, stable_name)
        body = self._promoted(target, candidate)
        self._upsert(target, stable_name, body, stable, what=f"promote {target}")
        for hook in self.on_promote:
            hook(target)
        self.retire(target, "candidate")

    def _promoted(self, target: TargetRef, candidate: JSON) -> JSON:
        """The stable Deployment running the candidate's config: derived again from the user's pod template (so the
        stable pods carry the user's own labels, not the candidate's), or the candidate's template relabelled."""
        raw = (candidate["metadata"].get("annotations") or {}).get(ANNOTATION_CONFIG_JSON)
        if raw:
            config = EngineConfig.model_validate_json(raw)
            replicas = int(candidate.get("spec", {}).get("replicas") or 0)
            return deployment_manifest(
                target,
                "stable",
                config,
                replicas,
                image=self.image,
                port=self.port,
                source=self.pod_source(target),
                served_model_name=self.served_model_name,
            )
        stable_name = variant_name(target, "stable")
        labels = {**candidate["metadata"].get("labels", {}), LABEL_VARIANT: "stable"}
        template = candidate["spec"]["template"]
        template.setdefault("metadata", {})["labels"] = {
            **template.get("metadata", {}).get("labels", {}),
            LABEL_VARIANT: "stable",
        }
        body: JSON = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": stable_name,
                "namespace": target.namespace,
                "labels": labels,
                "annotations": candidate["metadata"].get("annotations", {}),
            },
            "spec": {
                **candidate["spec"],
                "selector": {"matchLabels": {LABEL_TARGET: target.name, LABEL_VARIANT: "stable"}},
                "template": template,
            },
        }
        return body

    def ready_replicas(self, target: TargetRef, variant: str) -> int:
        current = self._get(target, variant_name(target, check_variant(variant)))
        if current is None:
            return 0
        return int((current.get("status") or {}).get("readyReplicas") or 0)

    def external_autoscaler(self, target: TargetRef) -> str | None:
        """``Kind/name`` of an HPA or KEDA ScaledObject that scales the stable (or production) Deployment."""
        names = {variant_name(target, "stable")} | ({self.template_deployment} if self.template_deployment else set())
        with kube_errors(f"horizontalpodautoscalers in {target.namespace}"):
            hpas = client.AutoscalingV2Api(self.apps.api_client).list_namespaced_horizontal_pod_autoscaler(
                target.namespace
            )
        for hpa in hpas.items:
            ref = hpa.spec.scale_target_ref if hpa.spec else None
            if ref is not None and ref.kind == "Deployment" and ref.name in names:
                return f"HorizontalPodAutoscaler/{hpa.metadata.name if hpa.metadata else ''}"
        try:
            with kube_errors(f"scaledobjects in {target.namespace}"):
                custom = client.CustomObjectsApi(self.apps.api_client)
                listed: JSON = custom.list_namespaced_custom_object(  # type: ignore[assignment]
                    "keda.sh", "v1alpha1", target.namespace, "scaledobjects"
                )
        except NotFound:
            return None  # KEDA is not installed
        for obj in listed.get("items", []):
            scale_ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
            if scale_ref.get("kind", "Deployment") == "Deployment" and scale_ref.get("name") in names:
                return f"ScaledObject/{obj['metadata']['name']}"
        return None

    def record_event(self, target: TargetRef, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.record(target, reason, message, warning=warning)

    # ----- canary trial pods ------------------------------------------------------------------------
    def create_trial_pod(self, target: TargetRef, manifest: Mapping[str, Any]) -> None:
        with kube_errors(f"trial pod {target.namespace}/{manifest['metadata']['name']}"):
            self.core.create_namespaced_pod(target.namespace, client.V1Pod.model_validate(dict(manifest)))

    def delete_trial_pod(self, target: TargetRef, name: str) -> None:
        try:
            with kube_errors(f"trial pod {target.namespace}/{name}"):
                self.core.delete_namespaced_pod(name, target.namespace, _preload_content=False)
        except NotFound:
            pass


__all__ = [
    "KubeCluster",
    "KubeEvents",
    "KubeForbidden",
    "KubeUnauthorized",
    "KubeUnavailable",
    "KubernetesLauncher",
    "api_message",
    "deployment_manifest",
    "engine_container",
    "event_manifest",
    "kube_errors",
    "load_api_client",
    "service_manifest",
    "translate",
]
