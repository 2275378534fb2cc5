"""What the simulated fleet holds and records: injected :class:`Faults`, each deployed :class:`VariantState`, and
per-tick records (:class:`FleetTick`, :class:`VariantTick`) with their :func:`totals`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from controller.domain.config import EngineConfig
from controller.domain.traffic import TrafficShape
from controller.domain.trial import Percentiles

VARIANTS: tuple[str, str] = ("stable", "candidate")
MetricsFault = Literal["outage", "nan", "empty"]


@dataclass
class Faults:
    """Injected faults. Mutate freely between ticks; :meth:`clear` removes them all."""

    latency_multiplier: dict[str, float] = field(default_factory=dict)
    error_rate: dict[str, float] = field(default_factory=dict)
    metrics: MetricsFault | None = None
    traffic_spike: float = 1.0

    def clear(self) -> None:
        self.latency_multiplier.clear()
        self.error_rate.clear()
        self.metrics = None
        self.traffic_spike = 1.0


@dataclass
class VariantState:
    """One deployed variant: its config and the time each replica becomes (or became) ready."""

    name: str
    config: EngineConfig
    ready_at: list[datetime]
    deployed_at: datetime

    @property
    def replicas(self) -> int:
        return len(self.ready_at)

    def ready(self, at: datetime) -> int:
        return sum(1 for t in self.ready_at if t <= at)


@dataclass(frozen=True, slots=True)
class VariantTick:
    """What one variant did during one tick."""

    variant: str
    config: EngineConfig | None
    replicas: int
    ready_replicas: int
    weight: int
    requests: int
    errors: int
    good_requests: int
    output_tokens: float
    prompt_tokens: float
    ttft_s: Percentiles | None
    tpot_s: Percentiles | None
    e2e_s: Percentiles | None
    spec_acceptance: float | None
    gpu_seconds: float
    capacity_tokens_per_s: float
    note: str = ""

    @property
    def served(self) -> int:
        return self.requests - self.errors


@dataclass(frozen=True, slots=True)
class FleetTick:
    """One tick of the fleet: ``[start, end)``, the true traffic shape, the weight and per-variant records."""

    start: datetime
    end: datetime
    shape: TrafficShape
    candidate_weight: int
    variants: dict[str, VariantTick]

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def totals(ticks: Sequence[FleetTick], variant: str | None = None) -> dict[str, float]:
    """Sums over ticks (optionally one variant): requests, errors, good requests, output tokens, GPU-seconds."""
    out = {"requests": 0.0, "errors": 0.0, "good_requests": 0.0, "output_tokens": 0.0, "gpu_seconds": 0.0}
    for t in ticks:
        for name, v in t.variants.items():
            if variant is not None and name != variant:
                continue
            out["requests"] += v.requests
            out["errors"] += v.errors
            out["good_requests"] += v.good_requests
            out["output_tokens"] += v.output_tokens
            out["gpu_seconds"] += v.gpu_seconds
    return out


__all__ = ["VARIANTS", "Faults", "FleetTick", "MetricsFault", "VariantState", "VariantTick", "totals"]
