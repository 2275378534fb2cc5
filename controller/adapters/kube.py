"""Kubernetes adapters on the official ``kubernetes`` client: the Cluster port, Events, canary trial Pods.

* :func:`load_api_client`: in-cluster config, or a kubeconfig (and context).
* :func:`kube_errors`: translates ``ApiException`` / urllib3 errors into :mod:`controller.errors` types
  (404 -> NotFound, 409/422 -> ClusterConflict, 403 -> KubeForbidden, 401 -> KubeUnauthorized,
  connection failures -> KubeUnavailable).
* :class:`KubeCluster` (Cluster): one Deployment per variant (``<target>-stable`` / ``<target>-candidate``) whose
  pods are the production Deployment's own with only the tuned flags replaced (:mod:`controller.adapters.vllm_pod`;
  a bare ``vllm serve MODEL`` without one), one Service per variant, replica counts, promotion, readiness from
  Deployment status, and Kubernetes Events carrying each action's reason.
* :class:`KubernetesLauncher`: canary trial Pods on the canary pool (manifest from
  :class:`controller.trials.launchers.KubernetesTrialManifest`), as a trial Launcher.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from controller.adapters.memory import check_replicas, check_variant
from controller.adapters.vllm_pod import PodSource, config_map_name, derive_pod_template, engine_invocation
from controller.domain.config import EngineConfig
from controller.domain.invocation import parse_invocation, render_invocation
from controller.domain.observation import TargetRef
from controller.errors import (
    ClusterConflict,
    InvalidInput,
    NotFound,
    PermanentError,
    ShiftlightError,
    TemporaryError,
)
from controller.trials.launchers import KubernetesTrialManifest, Launch

log = logging.getLogger(__name__)

JSON = dict[str, Any]

LABEL_TARGET = "shiftlight.dev/tuned-service"
LABEL_VARIANT = "shiftlight.dev/variant"
LABEL_CONFIG = "shiftlight.dev/config"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
ANNOTATION_CONFIG_JSON = "shiftlight.dev/config-json"
MANAGER = "shiftlight"

TS_GROUP, TS_VERSION, TS_PLURAL, TS_KIND = "shiftlight.dev", "v1alpha1", "tunedservices", "TunedService"


# ----- errors ---------------------------------------------------------------------------------------


class KubeForbidden(PermanentError):
    """RBAC refused the request (HTTP 403)."""


class KubeUnauthorized(PermanentError):
    """The API server did not accept the credentials (HTTP 401)."""


class KubeUnavailable(TemporaryError):
    """The API server could not be reached or answered 5xx."""


def api_message(exc: ApiException) -> str:
    """The API server's own message from a Status body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


def translate(exc: BaseException, what: str = "") -> ShiftlightError:
    """One :mod:`controller.errors` exception for a ``kubernetes``/urllib3 failure."""
    prefix = f"{what}: " if what else ""
    if isinstance(exc, ApiException):
        msg = prefix + api_message(exc)
        if exc.status == 404:
            return NotFound(msg)
        if exc.status in (409, 422):
            return ClusterConflict(msg, delay_s=0.5)
        if exc.status == 403:
            return KubeForbidden(msg)
        if exc.status == 401:
            return KubeUnauthorized(msg)
        if exc.status == 0 or exc.status is None or exc.status >= 500:
            return KubeUnavailable(msg, delay_s=5.0)
        return PermanentError(msg)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        reason = getattr(exc, "reason", None) or exc
        return KubeUnavailable(f"{prefix}cannot reach the Kubernetes API: {reason}", delay_s=5.0)
    return ShiftlightError(prefix + str(exc))


@contextmanager
def kube_errors(what: str = "") -> Iterator[None]:
    """Translate client exceptions raised inside the block (the adapter boundary)."""
    try:
        yield
    except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
        raise translate(exc, what) from None


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An API client: the given kubeconfig/context, else in-cluster config, else the default kubeconfig."""
    import os

    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return client.ApiClient(cfg)
    try:
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context
        )
        return api
    except config.ConfigException as exc:
        raise PermanentError(f"kubeconfig: {exc}") from None


# ----- manifests (pure) -----------------------------------------------------------------------------------


def variant_name(target: TargetRef, variant: str) -> str:
    return f"{target.name}-{variant}"


def variant_labels(target: TargetRef, variant: str) -> dict[str, str]:
    return {LABEL_TARGET: target.name, LABEL_VARIANT: variant, LABEL_MANAGED: MANAGER}


def engine_container(
    config_: EngineConfig,
    *,
    model: str,
    image: str,
    port: int = 8000,
    served_model_name: str | None = None,
    name: str = "vllm",
    resources: Mapping[str, Any] | None = None,
) -> JSON:
    """The vLLM container running ``config_`` (``vllm serve MODEL --port P <rendered args>``)."""
    base = ["serve", model, "--port", str(port)]
    if served_model_name:
        base += ["--served-model-name", served_model_name]
    command, args = render_invocation(parse_invocation(["vllm"], base, where=f"container {name}"), config_)
    container: JSON = {
        "name": name,
        "image": image,
        "args": args,
        "command": command,
        "ports": [{"name": "http", "containerPort": port}],
        "env": [{"name": k, "value": v} for k, v in sorted(config_.env().items())],
        "readinessProbe": {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 5},
    }
    if resources:
        container["resources"] = dict(resources)
    return container


def _bare_template(
    config_: EngineConfig,
    *,
    model: str,
    image: str,
    port: int,
    served_model_name: str | None,
    template: Mapping[str, Any] | None,
) -> JSON:
    """Production's pod spec (``template``) with its first container rebuilt for a bare model name: the existing
    rendering when the user's Deployment is not read."""
    pod_spec: JSON = json.loads(json.dumps(template)) if template else {}
    containers: list[JSON] = pod_spec.get("containers") or []
    base = containers[0] if containers else {}
    engine = engine_container(
        config_,
        model=model,
        image=str(base.get("image") or image),
        port=port,
        served_model_name=served_model_name,
        name=str(base.get("name") or "vllm"),
        resources=base.get("resources"),
    )
    pod_spec["containers"] = [engine, *containers[1:]]
    return {"metadata": {}, "spec": pod_spec}


def deployment_manifest(
    target: TargetRef,
    variant: str,
    config_: EngineConfig,
    replicas: int,
    *,
    image: str,
    port: int = 8000,
    template: Mapping[str, Any] | None = None,
    source: PodSource | None = None,
    served_model_name: str | None = None,
) -> JSON:
    """A Deployment for one variant. With ``source`` (the user's pod template), the pod is the user's own with only
    the tuned flags replaced and hygienic labels (:func:`derive_pod_template`); otherwise the engine container is
    built for ``target.model`` (pod spec copied from ``template`` when given)."""
    labels = {**variant_labels(target, variant), LABEL_CONFIG: config_.key()}
    if source is not None:
        pod_template = derive_pod_template(
            source,
            config_,
            variant=variant,
            labels=labels,
            served_model_name=served_model_name,
            fallback_model=target.model,
            port=port,
        )
    else:
        pod_template = _bare_template(
            config_, model=target.model, image=image, port=port, served_model_name=served_model_name, template=template
        )
        pod_template["metadata"] = {"labels": labels}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": variant_name(target, variant),
            "namespace": target.namespace,
            "labels": labels,
            "annotations": {
                "shiftlight.dev/config-label": config_.label(),
                ANNOTATION_CONFIG_JSON: config_.model_dump_json(),
            },
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {LABEL_TARGET: target.name, LABEL_VARIANT: variant}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": pod_template,
        },
    }


#: Kubernetes injects ``<SERVICE>_PORT`` into every pod of the namespace; vLLM reads ``VLLM_PORT`` as its own.
FORBIDDEN_SERVICE_NAMES = frozenset({"vllm"})


def service_manifest(target: TargetRef, variant: str, *, name: str, port: int = 8000) -> JSON:
    """The Service in front of one variant's pods. A Service named ``vllm`` is refused: Kubernetes would inject
    ``VLLM_PORT=tcp://...`` into every pod of the namespace, and vLLM reads that variable as its own setting."""
    if name in FORBIDDEN_SERVICE_NAMES:
        raise InvalidInput(
            f"a Service named {name!r} would set VLLM_PORT in every pod of {target.namespace} (Kubernetes service "
            "links), which vLLM reads as its own setting: choose another name",
            source=f"{target}",
            field="service",
        )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": target.namespace, "labels": variant_labels(target, variant)},
        "spec": {
            "selector": {LABEL_TARGET: target.name, LABEL_VARIANT: variant},
            "ports": [{"name": "http", "port": port, "targetPort": port}],
        },
    }


def event_manifest(
    target: TargetRef, *, reason: str, message: str, warning: bool, uid: str | None, now: datetime
) -> JSON:
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{target.name}.", "namespace": target.namespace},
        "involvedObject": {
            "apiVersion": f"{TS_GROUP}/{TS_VERSION}",
            "kind": TS_KIND,
            "name": target.name,
            "namespace": target.namespace,
            **({"uid": uid} if uid else {}),
        },
        "reason": reason[:128],
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": MANAGER},
        "reportingComponent": MANAGER,
        "reportingInstance": MANAGER,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


# ----- the adapters -----------------------------------------------------------------------------------


class KubeEvents:
    """Writes Kubernetes Events about a TunedService (each action's reason)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._uids: dict[tuple[str, str], str] = {}

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
        body = event_manifest(
            target, reason=reason, message=message, warning=warning, uid=self._uid(target), now=datetime.now(UTC)
        )
        try:
            with kube_errors(f"event {target}"):
                self.core.create_namespaced_event(target.namespace, client.CoreV1Event.model_validate(body))
        except ShiftlightError as exc:  # an Event is best effort: never fail the cycle for it
            log.warning("could not record event %s on %s: %s", reason, target, exc)


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


class KubernetesLauncher:
    """Trial launcher on the canary pool: creates the trial Pod (:class:`KubernetesTrialManifest`), waits for it to
    be Ready with an IP, and deletes it at teardown. A Pod that fails, is evicted or never becomes ready is a
    launch error with the reason (from its status and container state), which the runner turns into an
    ``infeasible`` result. Use it as ``TrialRunner(KubernetesLauncher(api, manifest), ...)`` (the LoadTester port).
    The Pod is owned by the TunedService, so Kubernetes collects anything left behind."""

    source = "kubernetes"

    def __init__(
        self,
        api: client.ApiClient,
        manifest: KubernetesTrialManifest,
        *,
        poll_s: float = 1.0,
        endpoint_host: Callable[[JSON], str] | None = None,
        pod_source: Callable[[], PodSource | None] | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.manifest = manifest
        self.poll_s = poll_s
        self.endpoint_host = endpoint_host or (lambda pod: str(pod["status"]["podIP"]))
        self.pod_source = pod_source
        """The user's pod template, read at each trial (e.g. ``KubeCluster.pod_source``); None: a bare-model Pod.
        A template Shiftlight cannot rewrite raises :class:`InvalidInput` (no Pod is created)."""

    def _read(self, name: str) -> JSON | None:
        try:
            with kube_errors(f"trial pod {self.manifest.namespace}/{name}"):
                pod = self.core.read_namespaced_pod(name, self.manifest.namespace)
        except NotFound:
            return None
        result: JSON = self.core.api_client.sanitize_for_serialization(pod)
        return result

    def start(self, config: EngineConfig, *, timeout_s: float | None = None) -> Launch:
        trial_id = f"{config.key()[:8]}-{uuid.uuid4().hex[:6]}"
        body = self.manifest.pod(config, trial_id, self.pod_source() if self.pod_source else None)
        name = body["metadata"]["name"]
        port = self.manifest.port
        t0 = time.monotonic()
        launch = Launch(endpoint="", model=self.manifest.served_model_name, ready=False, startup_s=0.0, _handle=name)
        try:
            with kube_errors(f"create trial pod {self.manifest.namespace}/{name}"):
                self.core.create_namespaced_pod(self.manifest.namespace, body)  # type: ignore[arg-type]
        except ShiftlightError as exc:
            launch.error = f"cannot create the trial pod: {exc}"
            return launch
        deadline = t0 + (timeout_s if timeout_s is not None else float(self.manifest.startup_timeout_s))
        while True:
            try:
                pod = self._read(name)
            except TemporaryError:
                pod = {}
            status = (pod or {}).get("status") or {}
            phase = status.get("phase")
            if pod is None or phase in ("Failed", "Succeeded"):
                launch.startup_s = time.monotonic() - t0
                launch.error = _pod_failure(pod, name)
                launch.log_tail = self.logs(launch)
                return launch
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            if ready and status.get("podIP"):
                launch.ready = True
                launch.startup_s = time.monotonic() - t0
                launch.endpoint = f"http://{self.endpoint_host(pod)}:{port}"
                return launch
            if time.monotonic() >= deadline:
                launch.startup_s = time.monotonic() - t0
                launch.error = f"trial pod {name} not ready within {deadline - t0:.0f} s ({phase or 'Pending'})"
                launch.log_tail = self.logs(launch)
                self.stop(launch)
                return launch
            time.sleep(self.poll_s)

    def logs(self, launch: Launch) -> tuple[str, ...]:
        name = launch._handle
        if not isinstance(name, str):
            return launch.log_tail
        try:
            text = self.core.read_namespaced_pod_log(name, self.manifest.namespace, tail_lines=50)
        except Exception:  # no logs yet, or the API cannot serve them: the status says why
            return launch.log_tail
        text = str(text)
        if text.lstrip().startswith("{") and "apiVersion" in text:
            return launch.log_tail  # an API object, not container output: no logs to show
        return tuple(text.splitlines()[-50:])

    def stop(self, launch: Launch) -> None:
        name = launch._handle
        if not isinstance(name, str):
            return
        try:
            with kube_errors(f"delete trial pod {self.manifest.namespace}/{name}"):
                self.core.delete_namespaced_pod(name, self.manifest.namespace, _preload_content=False)
        except NotFound:
            pass


def _pod_failure(pod: JSON | None, name: str) -> str:
    if pod is None:
        return f"trial pod {name} disappeared (deleted or evicted; is the canary node gone?)"
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if terminated:
            why = terminated.get("reason") or "Error"
            code, message = terminated.get("exitCode"), terminated.get("message", "")
            return f"engine container {why} (exit code {code}): {message}".strip()
    return (
        f"trial pod {name} {status.get('phase')}: {status.get('reason') or status.get('message') or 'no reason given'}"
    )


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
