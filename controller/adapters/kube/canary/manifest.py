"""The Pod one canary trial runs as on the TunedService's canary node pool (built offline, applied by
:class:`controller.adapters.kube.canary.pods.KubernetesLauncher`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from controller.adapters.kube.pod_template import PodSource, derive_pod_template
from controller.domain.config import EngineConfig
from controller.domain.invocation import parse_invocation, render_invocation


class Toleration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = "NoSchedule"


class OwnerRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = True
    block_owner_deletion: bool = True


class KubernetesTrialManifest(BaseModel):
    """Builds the Pod that runs one canary trial on the canary node pool.

    The Pod is owned by the tuning object (``owner``), so deleting it garbage-collects every trial; the labels
    let the operator list and clean up trials of one target.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    target_name: str
    model: str = Field(description="model path or hub id passed to --model")
    served_model_name: str
    image: str = "vllm/vllm-openai:v0.32.0"
    gpu_count: int = Field(default=1, ge=0)
    gpu_resource: str = "nvidia.com/gpu"
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    owner: OwnerRef
    port: int = Field(default=8000, ge=1, le=65535)
    shutdown_timeout_s: int = Field(default=30, ge=0)
    startup_timeout_s: int = Field(default=900, ge=10)
    extra_args: tuple[str, ...] = ()
    extra_env: dict[str, str] = Field(default_factory=dict)
    memory: str | None = "32Gi"
    cpu: str | None = "4"
    service_account: str | None = None
    override_image: str | None = Field(default=None, description="with a user template: replaces its engine image")

    def labels(self, config: EngineConfig, trial_id: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "vllm",
            "app.kubernetes.io/component": "canary-trial",
            "app.kubernetes.io/managed-by": "shiftlight",
            "shiftlight.dev/target": self.target_name,
            "shiftlight.dev/config-key": config.key(),
            "shiftlight.dev/trial": trial_id,
        }

    def args(self, config: EngineConfig) -> list[str]:
        """The ``vllm serve`` arguments of the bare-model trial Pod (no user template)."""
        base = [
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            "0.0.0.0",
            "--port",
            str(self.port),
            "--shutdown-timeout",
            str(self.shutdown_timeout_s),
            *self.extra_args,
        ]
        _, args = render_invocation(parse_invocation(["vllm", "serve"], base, where="trial pod container vllm"), config)
        return args

    def name(self, trial_id: str) -> str:
        return f"{self.target_name}-trial-{trial_id}"[:63].rstrip("-")

    def _metadata(self, config: EngineConfig, trial_id: str, annotations: Mapping[str, str]) -> dict[str, Any]:
        return {
            "name": self.name(trial_id),
            "namespace": self.namespace,
            "labels": self.labels(config, trial_id),
            "annotations": {
                **annotations,
                "shiftlight.dev/config": config.label(),
                "shiftlight.dev/config-json": config.model_dump_json(),
            },
            "ownerReferences": [
                {
                    "apiVersion": self.owner.api_version,
                    "kind": self.owner.kind,
                    "name": self.owner.name,
                    "uid": self.owner.uid,
                    "controller": self.owner.controller,
                    "blockOwnerDeletion": self.owner.block_owner_deletion,
                }
            ],
        }

    def pod(self, config: EngineConfig, trial_id: str, source: PodSource | None = None) -> dict[str, Any]:
        """The Pod manifest (a plain dict ready for the API or ``kubectl apply``).

        With ``source`` (the user's pod template) the trial Pod is the user's own pod with only the tuned flags
        replaced (:func:`derive_pod_template`, variant ``trial``: out of the user's selectors), placed on the canary
        pool (its node selector replaces the user's, its tolerations are added), ``restartPolicy: Never``, the
        pool's image when it names one, and ``served_model_name`` when the user's command line names none.
        Without it the Pod is built for the bare model name."""
        if source is not None:
            return self._pod_from(source, config, trial_id)
        env = {**self.extra_env, **config.env()}
        resources: dict[str, dict[str, str]] = {"requests": {}, "limits": {}}
        if self.gpu_count:
            resources["requests"][self.gpu_resource] = str(self.gpu_count)
            resources["limits"][self.gpu_resource] = str(self.gpu_count)
        if self.memory:
            resources["requests"]["memory"] = self.memory
            resources["limits"]["memory"] = self.memory
        if self.cpu:
            resources["requests"]["cpu"] = self.cpu
        probe_http = {"path": "/health", "port": self.port}
        container: dict[str, Any] = {
            "name": "vllm",
            "image": self.image,
            "command": ["vllm", "serve"],
            "args": self.args(config),
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
            "ports": [{"name": "http", "containerPort": self.port, "protocol": "TCP"}],
            "resources": resources,
            "readinessProbe": {"httpGet": probe_http, "periodSeconds": 5, "failureThreshold": 3},
            "startupProbe": {
                "httpGet": probe_http,
                "periodSeconds": 10,
                "failureThreshold": max(1, self.startup_timeout_s // 10),
            },
            "livenessProbe": {"httpGet": probe_http, "periodSeconds": 10, "failureThreshold": 6},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        }
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": self.shutdown_timeout_s + 10,
            "containers": [container],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        }
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            spec["tolerations"] = [t.model_dump(exclude_none=True) for t in self.tolerations]
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        return {"apiVersion": "v1", "kind": "Pod", "metadata": self._metadata(config, trial_id, {}), "spec": spec}

    def _pod_from(self, source: PodSource, config: EngineConfig, trial_id: str) -> dict[str, Any]:
        template = derive_pod_template(
            source,
            config,
            variant="trial",
            labels=self.labels(config, trial_id),
            served_model_name=self.served_model_name,
            fallback_model=self.model,
            port=self.port,
        )
        meta = template.get("metadata") or {}
        metadata = self._metadata(config, trial_id, meta.get("annotations") or {})
        metadata["labels"] = {**(meta.get("labels") or {}), **metadata["labels"]}
        spec: dict[str, Any] = template["spec"]
        spec["restartPolicy"] = "Never"
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            known = spec.get("tolerations") or []
            spec["tolerations"] = [
                *known,
                *(t for t in (t.model_dump(exclude_none=True) for t in self.tolerations) if t not in known),
            ]
        if self.service_account and not spec.get("serviceAccountName"):
            spec["serviceAccountName"] = self.service_account
        if self.override_image:
            for c in spec["containers"]:
                if c.get("name") == source.container or len(spec["containers"]) == 1:
                    c["image"] = self.override_image
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


__all__ = ["KubernetesTrialManifest", "OwnerRef", "Toleration"]
