"""The Cluster port on Kubernetes Deployments (:class:`KubeCluster`).

One Deployment per variant (``<target>-stable`` / ``<target>-candidate``) whose pods are the production
Deployment's own with only the tuned flags replaced (:mod:`controller.adapters.kube.pod_template`; a bare
``vllm serve MODEL`` without one), one Service per variant, replica counts, promotion, readiness from Deployment
status, and Kubernetes Events carrying each action's reason (:mod:`controller.adapters.kube.events`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from kubernetes import client

from controller.adapters.checks import check_replicas, check_variant
from controller.adapters.kube.client import kube_errors
from controller.adapters.kube.events import KubeEvents
from controller.adapters.kube.manifests import (
    ANNOTATION_CONFIG_JSON,
    JSON,
    LABEL_TARGET,
    LABEL_VARIANT,
    deployment_manifest,
    service_manifest,
    variant_name,
)
from controller.adapters.kube.pod_template import PodSource, config_map_name, engine_invocation
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.errors import NotFound

log = logging.getLogger(__name__)


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

    def promote(self, target: TargetRef) -> EngineConfig | None:
        """Roll the stable Deployment to the candidate's pod template (surge, no unavailability); retire the
        candidate. Returns the config the candidate Deployment ran (its config annotation, as read back), which is
        what stable runs now; None when the candidate carries none."""
        candidate = self._get(target, variant_name(target, "candidate"))
        if candidate is None:
            raise NotFound(f"{target}: no candidate deployment to promote")
        raw = (candidate["metadata"].get("annotations") or {}).get(ANNOTATION_CONFIG_JSON)
        running = EngineConfig.model_validate_json(raw) if raw else None
        stable_name = variant_name(target, "stable")
        stable = self._get(target, stable_name)
        body = self._promoted(target, candidate)
        self._upsert(target, stable_name, body, stable, what=f"promote {target}")
        for hook in self.on_promote:
            hook(target)
        self.retire(target, "candidate")
        return running

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

    def record_event(
        self, target: TargetRef, reason: str, message: str, *, warning: bool = False, action: str = ""
    ) -> None:
        self.events.record(target, reason, message, warning=warning, action=action)


__all__ = ["KubeCluster"]
