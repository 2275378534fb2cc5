"""Canary trials for a TunedService on the Kubernetes backend: the trial Pod manifest from its canary pool (with
the operator's defaults), the quality gate from its policy, and the :class:`TrialRunner` that runs them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client

from controller.adapters.kube.canary.manifest import KubernetesTrialManifest, OwnerRef
from controller.adapters.kube.canary.manifest import Toleration as PodToleration
from controller.adapters.kube.canary.pods import KubernetesLauncher
from controller.adapters.kube.cluster import KubeCluster
from controller.crd.models import API_VERSION, TunedServiceSpec
from controller.crd.models import Toleration as CanaryToleration
from controller.domain.observation import TargetRef
from controller.policy import Policy
from controller.trials.engine.launchers import Launcher
from controller.trials.runner import TrialRunner
from controller.trials.verdict.quality import quality_gate_for


def tuned_service_owner(target: TargetRef, meta: Mapping[str, Any]) -> OwnerRef:
    """The TunedService as the owner of what Shiftlight creates for it (collected when it is deleted)."""
    return OwnerRef(api_version=API_VERSION, kind="TunedService", name=target.name, uid=str(meta.get("uid", "")))


def canary_trials(
    api: client.ApiClient,
    target: TargetRef,
    spec: TunedServiceSpec,
    meta: Mapping[str, Any],
    default_image: str,
    *,
    default_node_selector: Mapping[str, str] | None = None,
    default_tolerations: Sequence[CanaryToleration] = (),
    policy: Policy | None = None,
    selectors: Sequence[Mapping[str, str]] = (),
    launcher: Callable[[KubernetesTrialManifest], Launcher] | None = None,
) -> TrialRunner:
    """Trials as Pods on the TunedService's canary pool, owned by it (garbage-collected with it). A pool that sets
    no node selector (or no tolerations) gets the operator's defaults (``SHIFTLIGHT_CANARY_NODE_SELECTOR``,
    ``SHIFTLIGHT_CANARY_TOLERATIONS``). With a ``policy``, its lossy configs must pass the policy's quality gate
    against the stable variant (the TunedService's Service, in its namespace). Trial pods stay out of
    ``selectors`` (a stable InferencePool's) besides the production Deployment's and the stable Service's."""
    pool = spec.canary_pool
    node_selector = dict(pool.node_selector) or dict(default_node_selector or {})
    tolerations = tuple(pool.tolerations) or tuple(default_tolerations)
    manifest = KubernetesTrialManifest(
        namespace=target.namespace,
        target_name=target.name,
        model=spec.model.name,
        served_model_name=spec.model.served_model_name or spec.model.name,
        image=pool.image or default_image,
        gpu_count=pool.gpu_count,
        gpu_resource=pool.gpu_resource,
        node_selector=node_selector,
        tolerations=tuple(
            PodToleration(key=t.key or "", operator=t.operator, value=t.value, effect=t.effect) for t in tolerations
        ),
        owner=tuned_service_owner(target, meta),
        port=spec.workload.port,
        override_image=pool.image,
    )
    template = KubeCluster(
        api,
        port=spec.workload.port,
        template_deployment=spec.workload.deployments[0],
        container=spec.workload.container,
        stable_service=spec.workload.service,
        selectors=selectors,
    )
    gate = None
    if policy is not None:
        stable = f"http://{spec.workload.service}.{target.namespace}.svc:{spec.workload.port}"
        gate = quality_gate_for(policy, stable, manifest.served_model_name or spec.model.name)
    return TrialRunner(
        KubernetesLauncher(api, manifest, pod_source=lambda: template.pod_source(target))
        if launcher is None
        else launcher(manifest),
        model=spec.model.name,
        gpu_type=spec.gpu_type,
        engine_version=manifest.image,
        quality_gate=gate,
        gate_if=policy.is_lossy if policy is not None else None,
    )
