"""In-memory ports for testing code that drives Shiftlight's ports: they keep state in dicts and record every call.

* :class:`InMemoryRouter` (TrafficRouter): candidate weight per target, with a history of every change.
* :class:`InMemoryCluster` (Cluster): variants per target and every call made, in order; events with timestamps.

A notifier that records what it is given is :class:`controller.adapters.notify.recording.RecordingNotifier`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.adapters.checks import check_replicas, check_variant, check_weight
from controller.adapters.records import ClusterCall, RecordedEvent
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.errors import NotFound
from controller.ports import Clock

__all__ = ["DeployedVariant", "InMemoryCluster", "InMemoryRouter"]


class InMemoryRouter:
    """TrafficRouter keeping the candidate weight per target in memory. Unknown targets start at 0."""

    def __init__(self, initial: dict[str, int] | None = None) -> None:
        self._weights: dict[str, int] = {k: check_weight(v) for k, v in (initial or {}).items()}
        self.history: list[tuple[TargetRef, int]] = []

    def get_weight(self, target: TargetRef) -> int:
        return self._weights.get(str(target), 0)

    def set_weight(self, target: TargetRef, candidate_weight: int) -> None:
        self._weights[str(target)] = check_weight(candidate_weight)
        self.history.append((target, candidate_weight))


@dataclass(frozen=True)
class DeployedVariant:
    config: EngineConfig
    replicas: int


@dataclass
class InMemoryCluster:
    """Cluster keeping variants in a dict and recording every call (``calls``) and event (``events``).

    Replicas are ready as soon as they are deployed, except those of variants listed in ``starting`` (a test
    can put a variant there to model a cold start). ``scale`` and ``promote`` of a variant that does not exist
    raise :class:`NotFound`; ``retire`` of a missing variant is a no-op (deleting what is already gone is not an
    error), but is still recorded. With a ``router``, ``promote`` also sends all traffic to the new stable.
    """

    clock: Clock | None = None
    router: InMemoryRouter | None = None
    starting: set[str] = field(default_factory=set)
    variants: dict[tuple[str, str], DeployedVariant] = field(default_factory=dict)
    calls: list[ClusterCall] = field(default_factory=list)
    events: list[RecordedEvent] = field(default_factory=list)
    autoscalers: dict[str, str] = field(default_factory=dict)
    """``{"ns/name": "HorizontalPodAutoscaler/x"}``: external autoscalers owning a target's replicas."""

    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        check_variant(variant)
        check_replicas(replicas)
        self.calls.append(ClusterCall("deploy", target, variant, config, replicas))
        self.variants[(str(target), variant)] = DeployedVariant(config, replicas)

    def scale(self, target: TargetRef, variant: str, replicas: int) -> None:
        check_variant(variant)
        check_replicas(replicas)
        self.calls.append(ClusterCall("scale", target, variant, replicas=replicas))
        key = (str(target), variant)
        current = self.variants.get(key)
        if current is None:
            raise NotFound(f"{target}: variant {variant!r} is not deployed")
        self.variants[key] = DeployedVariant(current.config, replicas)

    def retire(self, target: TargetRef, variant: str) -> None:
        check_variant(variant)
        self.calls.append(ClusterCall("retire", target, variant))
        self.variants.pop((str(target), variant), None)

    def promote(self, target: TargetRef) -> None:
        self.calls.append(ClusterCall("promote", target, "candidate"))
        candidate = self.variants.pop((str(target), "candidate"), None)
        if candidate is None:
            raise NotFound(f"{target}: no candidate variant to promote")
        self.variants[(str(target), "stable")] = candidate
        if self.router is not None:
            self.router.set_weight(target, 0)

    def external_autoscaler(self, target: TargetRef) -> str | None:
        """An HPA/KEDA object set on this cluster by a test or the operator's user (``None``: Shiftlight scales)."""
        return self.autoscalers.get(str(target))

    def ready_replicas(self, target: TargetRef, variant: str) -> int:
        check_variant(variant)
        current = self.variants.get((str(target), variant))
        if current is None or variant in self.starting:
            return 0
        return current.replicas

    def record_event(
        self, target: TargetRef, reason: str, message: str, *, warning: bool = False, action: str = ""
    ) -> None:
        at = self.clock.now() if self.clock is not None else None
        self.calls.append(ClusterCall("event", target, detail=f"{reason}: {message}"))
        self.events.append(RecordedEvent(target, reason, message, warning, at, action))

    # ----- reading back -------------------------------------------------------------------------------------------
    def variant(self, target: TargetRef, variant: str) -> DeployedVariant | None:
        return self.variants.get((str(target), variant))

    def ops(self) -> list[str]:
        """The calls as short strings, e.g. ``["deploy candidate x1", "scale candidate x2", "retire candidate"]``."""
        out: list[str] = []
        for c in self.calls:
            if c.op == "event":
                out.append(f"event {c.detail}")
            elif c.op in ("retire", "promote"):
                out.append(f"{c.op} {c.variant}")
            else:
                out.append(f"{c.op} {c.variant} x{c.replicas}")
        return out
