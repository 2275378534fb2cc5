"""Kubernetes adapters on the official ``kubernetes`` client: the Cluster port, Events, canary trial Pods.

* :func:`load_api_client`: in-cluster config, or a kubeconfig (and context).
* :func:`kube_errors`: translates ``ApiException`` / urllib3 errors into :mod:`controller.errors` types
  (404 -> NotFound, 409/422 -> ClusterConflict, 403 -> KubeForbidden, 401 -> KubeUnauthorized,
  connection failures -> KubeUnavailable).
* :class:`KubeCluster` (Cluster): one Deployment per variant (``<target>-stable`` / ``<target>-candidate``) whose
  ``vllm serve`` args are rendered by ``EngineConfig.vllm_args()``, one Service per variant, replica counts,
  promotion, readiness from Deployment status, and Kubernetes Events carrying each action's reason.
* :class:`KubernetesLauncher`: canary trial Pods on the canary pool (manifest from
  :class:`controller.trials.launchers.KubernetesTrialManifest`), as a trial Launcher.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from controller.adapters.memory import check_replicas, check_variant
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.errors import ClusterConflict, NotFound, PermanentError, ShiftlightError, TemporaryError
from controller.trials.launchers import KubernetesTrialManifest, Launch

log = logging.getLogger(__name__)

JSON = dict[str, Any]

LABEL_TARGET = "shiftlight.dev/tuned-service"
LABEL_VARIANT = "shiftlight.dev/variant"
LABEL_CONFIG = "shiftlight.dev/config"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
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
    container: JSON = {
        "name": name,
        "image": image,
        "args": config_.serve_command(model, served_model_name=served_model_name, port=port)[1:],
        "command": ["vllm"],
        "ports": [{"name": "http", "containerPort": port}],
        "env": [{"name": k, "value": v} for k, v in sorted(config_.env().items())],
        "readinessProbe": {"httpGet": {"path": "/health", "port": port}, "periodSeconds": 5},
    }
    if resources:
        container["resources"] = dict(resources)
    return container


def deployment_manifest(
    target: TargetRef,
    variant: str,
    config_: EngineConfig,
    replicas: int,
    *,
    image: str,
    port: int = 8000,
    template: Mapping[str, Any] | None = None,
) -> JSON:
    """A Deployment for one variant; pod template copied from ``template`` (production's) when given."""
    labels = {**variant_labels(target, variant), LABEL_CONFIG: config_.key()}
    pod_spec: JSON = json.loads(json.dumps(template)) if template else {}
    containers: list[JSON] = pod_spec.get("containers") or []
    base = containers[0] if containers else {}
    engine = engine_container(
        config_,
        model=target.model,
        image=str(base.get("image") or image),
        port=port,
        name=str(base.get("name") or "vllm"),
        resources=base.get("resources"),
    )
    pod_spec["containers"] = [engine, *containers[1:]]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": variant_name(target, variant),
            "namespace": target.namespace,
            "labels": labels,
            "annotations": {"shiftlight.dev/config-label": config_.label()},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {LABEL_TARGET: target.name, LABEL_VARIANT: variant}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def service_manifest(target: TargetRef, variant: str, *, name: str, port: int = 8000) -> JSON:
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
    ) -> None:
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.image = image
        self.port = port
        self.template_deployment = template_deployment
        self.candidate_service = candidate_service
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

    def _template(self, target: TargetRef) -> JSON | None:
        if not self.template_deployment:
            return None
        prod = self._get(target, self.template_deployment)
        if prod is None:
            return None
        spec: JSON = prod.get("spec", {}).get("template", {}).get("spec", {})
        return spec

    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        check_variant(variant)
        check_replicas(replicas)
        body = deployment_manifest(
            target, variant, config, replicas, image=self.image, port=self.port, template=self._template(target)
        )
        name = body["metadata"]["name"]
        current = self._get(target, name)
        with kube_errors(f"deploy {target.namespace}/{name}"):
            if current is None:
                self.apps.create_namespaced_deployment(target.namespace, client.V1Deployment.model_validate(body))
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.apps.replace_namespaced_deployment(
                    name, target.namespace, client.V1Deployment.model_validate(body)
                )
        if variant == "candidate" and self.candidate_service:
            self._ensure_service(target, variant, self.candidate_service)
        log.info("%s: deployed %s (%s) x%d", target, name, config.label(), replicas)

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
        with kube_errors(f"promote {target}"):
            if stable is None:
                self.apps.create_namespaced_deployment(target.namespace, client.V1Deployment.model_validate(body))
            else:
                body["metadata"]["resourceVersion"] = stable["metadata"]["resourceVersion"]
                self.apps.replace_namespaced_deployment(
                    stable_name, target.namespace, client.V1Deployment.model_validate(body)
                )
        for hook in self.on_promote:
            hook(target)
        self.retire(target, "candidate")

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
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.manifest = manifest
        self.poll_s = poll_s
        self.endpoint_host = endpoint_host or (lambda pod: str(pod["status"]["podIP"]))

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
        body = self.manifest.pod(config, trial_id)
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
