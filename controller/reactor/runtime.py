"""What the loop drives for one TunedService (:class:`TargetRuntime`), the :class:`Backend` that builds it, and the
two composites both backends use: a cluster whose Events also go to Kubernetes, a router mirrored onto another."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller.adapters.kube.events import KubeEvents
from controller.crd.models import TunedServiceSpec
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.ports import Cluster, Notifier, TrafficRouter
from controller.reconcile import Ports, Reconciler


@dataclass
class TargetRuntime:
    """What the loop needs for one TunedService."""

    reconciler: Reconciler
    ports: Ports
    advance: Callable[[float], object] = field(default=lambda seconds: None)
    """Move (simulated) time forward by the previous cycle's requeue, before the next cycle."""
    generation: int | None = None
    notifier: Notifier | None = None
    initial_config: EngineConfig | None = None
    """What the workload runs before Shiftlight changed anything (a TunedService without a status starts there)."""


class Backend(Protocol):
    def runtime(self, target: TargetRef, spec: TunedServiceSpec, body: Mapping[str, Any]) -> TargetRuntime: ...

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted TunedService's runtimes and shut down its workers."""
        ...

    def held(self) -> set[tuple[str, str]]:
        """The TunedServices (namespace, name) this backend holds a runtime or a worker for."""
        ...


class EventingCluster:
    """A Cluster that delegates to ``inner`` and writes every ``record_event`` as a Kubernetes Event."""

    def __init__(self, inner: Cluster, events: KubeEvents) -> None:
        self.inner = inner
        self.events = events
        self.on_promote: list[Callable[[TargetRef], None]] = []

    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        self.inner.deploy(target, variant, config, replicas)

    def scale(self, target: TargetRef, variant: str, replicas: int) -> None:
        self.inner.scale(target, variant, replicas)

    def retire(self, target: TargetRef, variant: str) -> None:
        self.inner.retire(target, variant)

    def promote(self, target: TargetRef) -> None:
        self.inner.promote(target)
        for hook in self.on_promote:
            hook(target)

    def ready_replicas(self, target: TargetRef, variant: str) -> int:
        return self.inner.ready_replicas(target, variant)

    def external_autoscaler(self, target: TargetRef) -> str | None:
        return self.inner.external_autoscaler(target)

    def record_event(
        self, target: TargetRef, reason: str, message: str, *, warning: bool = False, action: str = ""
    ) -> None:
        self.inner.record_event(target, reason, message, warning=warning, action=action)
        self.events.record(target, reason, message, warning=warning, action=action)


class MirroredRouter:
    """A TrafficRouter that routes on ``primary`` and mirrors every weight onto ``mirror`` (e.g. an HTTPRoute)."""

    def __init__(self, primary: TrafficRouter, mirror: TrafficRouter) -> None:
        self.primary = primary
        self.mirror = mirror

    def get_weight(self, target: TargetRef) -> int:
        return self.primary.get_weight(target)

    def set_weight(self, target: TargetRef, candidate_weight: int) -> None:
        self.primary.set_weight(target, candidate_weight)
        self.mirror.set_weight(target, candidate_weight)


__all__ = ["Backend", "EventingCluster", "MirroredRouter", "TargetRuntime"]
