"""Kubernetes manifests for the objects Shiftlight writes (pure: no API calls).

One Deployment per variant (``<target>-stable`` / ``<target>-candidate``) whose pods are the production
Deployment's own with only the tuned flags replaced (:mod:`controller.adapters.kube.pod_template`; a bare
``vllm serve MODEL`` without one), one Service per variant, and the Events carrying each action's reason.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from controller.adapters.kube.pod_template import PodSource, command_value, derive_pod_template
from controller.domain.config import EngineConfig
from controller.domain.invocation import parse_invocation, render_invocation
from controller.domain.log_tail import clip_utf8
from controller.domain.observation import TargetRef
from controller.domain.text import one_line
from controller.errors import InvalidInput

JSON = dict[str, Any]

LABEL_TARGET = "shiftlight.dev/tuned-service"
LABEL_VARIANT = "shiftlight.dev/variant"
LABEL_CONFIG = "shiftlight.dev/config"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
ANNOTATION_CONFIG_JSON = "shiftlight.dev/config-json"
MANAGER = "shiftlight"

TS_GROUP, TS_VERSION, TS_PLURAL, TS_KIND = "shiftlight.dev", "v1alpha1", "tunedservices", "TunedService"


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
    """The vLLM container running ``config_`` (``vllm serve MODEL --port P <rendered args>``). A model or served
    model name that starts with ``-`` is refused: it would be read as a flag."""
    where = f"container {name}"
    base = ["serve", command_value(model, field="spec.model.name", where=where), "--port", str(port)]
    if served_model_name:
        base += [
            "--served-model-name",
            command_value(served_model_name, field="spec.model.servedModelName", where=where),
        ]
    command, args = render_invocation(parse_invocation(["vllm"], base, where=where), config_)
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
    target: TargetRef, *, reason: str, message: str, warning: bool, uid: str | None, now: datetime, action: str = ""
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
        "reason": clip_utf8(reason, 128),
        **({"action": clip_utf8(action, 128)} if action else {}),
        # one line, no controls or invisible characters (a reason may quote a tenant's text or an engine's log
        # line); in bytes
        "message": clip_utf8(one_line(message), 1024),
        "type": "Warning" if warning else "Normal",
        "source": {"component": MANAGER},
        "reportingComponent": MANAGER,
        "reportingInstance": MANAGER,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


__all__ = [
    "ANNOTATION_CONFIG_JSON",
    "FORBIDDEN_SERVICE_NAMES",
    "LABEL_CONFIG",
    "LABEL_MANAGED",
    "LABEL_TARGET",
    "LABEL_VARIANT",
    "MANAGER",
    "deployment_manifest",
    "engine_container",
    "event_manifest",
    "service_manifest",
    "variant_labels",
    "variant_name",
]
