"""Per-TunedService runtimes: the Ports and Reconciler the loop drives, built from the operator settings.

* ``simulator`` (default): an in-process :class:`SimulatedFleet` per TunedService plays production. Metrics, the
  load tester, the router and the cluster act on that fleet; every action's Event still goes to the Kubernetes
  API, and when the TunedService names an HTTPRoute (and the Gateway API is installed) the weights are mirrored
  onto the route too. Simulated time moves by each cycle's ``requeue_after_s`` (compressed by
  ``loop.time_scale`` in real time).
* ``kubernetes``: Prometheus metrics, Deployments per variant (:class:`KubeCluster`) and HTTPRoute weights
  (:class:`GatewayRouter`, replica-ratio fallback; a candidate InferencePool next to an InferencePool backend).
  Trials run as Pods on the canary pool beside the cycle (started, then polled; one at a time per TunedService);
  each reports its progress in its Trial CR, and results are cached in a ConfigMap per TunedService
  (``<name>-trial-cache``), so a restarted operator never re-runs a measured trial.

Runtimes live as long as the operator process; all decision state lives in the CR status.
"""

from __future__ import annotations

from controller.adapters.kube.client import ApiClient
from controller.errors import NotFound
from controller.ports import Notifier
from controller.reactor.kubernetes_backend import KubernetesBackend
from controller.reactor.runtime import Backend
from controller.reactor.settings import OperatorSettings
from controller.reactor.simulator_backend import SimulatorBackend


def make_backend(settings: OperatorSettings, api: ApiClient, *, notifier: Notifier | None = None) -> Backend:
    if settings.backend == "simulator":
        return SimulatorBackend(settings, api, notifier=notifier)
    if settings.backend == "kubernetes":
        return KubernetesBackend(settings, api, notifier=notifier)
    raise NotFound(f"unknown backend {settings.backend!r}")


__all__ = ["make_backend"]
