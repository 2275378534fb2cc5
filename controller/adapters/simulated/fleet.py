"""Adapters onto the in-process :class:`~controller.simulator.fleet.service.SimulatedFleet`.

* :class:`SimulatedMetrics` (MetricsSource): reads the fleet's recorded ticks the way a Prometheus query would read
  counters and histograms over a window, and fails the same ways (outage, empty answer, NaN).
* :class:`SimulatedRouter` (TrafficRouter): the fleet's candidate weight.
* :class:`SimulatedCluster` (Cluster): deploys, scales, retires and promotes variants on the fleet; events are kept
  in a list, stamped with the fleet's clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from controller.adapters.checks import check_variant, check_weight
from controller.adapters.records import ClusterCall, RecordedEvent
from controller.domain.config import EngineConfig
from controller.domain.observation import P95, DataProblem, Observation, TargetRef, VariantSignal, VariantStats
from controller.domain.profile import TrafficProfile
from controller.domain.slo import SLO
from controller.domain.traffic import TimeWindow, TrafficShape
from controller.errors import MetricsUnavailable
from controller.simulator.fleet.records import VARIANTS, FleetTick
from controller.simulator.fleet.service import SimulatedFleet
from controller.simulator.percentiles import mixture_quantile
from controller.simulator.traffic.diurnal import DiurnalTraffic, mix_shapes

__all__ = ["SimulatedCluster", "SimulatedMetrics", "SimulatedRouter"]


class SimulatedMetrics:
    """MetricsSource over a :class:`SimulatedFleet`.

    ``observe(target, start, end)`` aggregates the ticks that started in ``[start, end)``:

    * shape: lengths, repetitiveness and prefix share mixed per request; arrival rate and concurrency averaged over
      time (as ``rate()`` and an averaged gauge would give them);
    * per variant: requests, errors and good requests summed; TTFT/TPOT p95, and at the fleet SLO's percentiles
      where those are not 95, of the request-weighted mixture of the ticks' distributions (as ``histogram_quantile``
      over summed buckets would); output tokens per second over the window; speculative acceptance weighted by
      output tokens.

    Raises :class:`MetricsUnavailable` when no tick lies in the window, when a metrics outage, an empty answer or
    NaN answers are injected (``fleet.faults.metrics``), and whenever the shape is not finite. A variant's SLO signal
    that is absent or not finite is recorded in its ``problems`` (as the Prometheus adapter does), never passed on.
    """

    def __init__(self, fleet: SimulatedFleet, *, retry_after_s: float = 30.0) -> None:
        self.fleet = fleet
        self.retry_after_s = retry_after_s

    def observe(self, target: TargetRef, *, start: datetime, end: datetime) -> Observation:
        fault = self.fleet.faults.metrics
        if fault == "outage":
            raise MetricsUnavailable(f"{target}: metrics backend unreachable", delay_s=self.retry_after_s)
        if end <= start:
            raise MetricsUnavailable(f"{target}: empty window {start.isoformat()} .. {end.isoformat()}", delay_s=0)
        self.fleet.catch_up()
        ticks = self.fleet.ticks_between(start, end)
        if not ticks or fault == "empty":
            raise MetricsUnavailable(
                f"{target}: no samples between {start.isoformat()} and {end.isoformat()}", delay_s=self.retry_after_s
            )
        seconds = sum(t.seconds for t in ticks)
        base = mix_shapes([(max(t.shape.arrival_rate_rps * t.seconds, 1e-12), t.shape) for t in ticks])
        shape = base.model_copy(
            update={
                "arrival_rate_rps": sum(t.shape.arrival_rate_rps * t.seconds for t in ticks) / seconds,
                "concurrency": sum(t.shape.concurrency * t.seconds for t in ticks) / seconds,
                "window": _dominant_window(ticks),
            }
        )
        variants = {
            name: self._variant(name, ticks, seconds, self.fleet.slo) for name in VARIANTS if _present(name, ticks)
        }
        if fault == "nan":
            variants = {
                name: v.model_copy(
                    update={
                        "ttft_p95_s": math.nan,
                        "output_tokens_per_s": math.nan,
                        **({"ttft_slo_s": math.nan} if v.ttft_slo_percentile is not None else {}),
                    }
                )
                for name, v in variants.items()
            }
            shape = shape.model_copy(update={"arrival_rate_rps": math.nan})
        _require_finite(target, shape.arrival_rate_rps, shape.concurrency)
        for v in variants.values():
            _require_finite(target, v.spec_acceptance_rate)
        variants = {name: _with_problems(v) for name, v in variants.items()}
        return Observation(target=str(target), start=start, end=end, shape=shape, variants=variants)

    @staticmethod
    def _variant(name: str, ticks: list[FleetTick], seconds: float, slo: SLO) -> VariantStats:
        recs = [t.variants[name] for t in ticks if name in t.variants]
        requests = sum(r.requests for r in recs)
        errors = sum(r.errors for r in recs)
        good = sum(r.good_requests for r in recs)
        tokens = sum(r.output_tokens for r in recs)
        ttft = mixture_quantile(((r.served, r.ttft_s) for r in recs if r.ttft_s is not None), 0.95)
        tpot = mixture_quantile(((r.served, r.tpot_s) for r in recs if r.tpot_s is not None), 0.95)
        at_slo: dict[str, float | None] = {}  # the latency at each SLO percentile that is not the p95 above
        if slo.ttft_percentile != P95:
            at_slo["ttft_slo_percentile"] = slo.ttft_percentile
            at_slo["ttft_slo_s"] = mixture_quantile(
                ((r.served, r.ttft_s) for r in recs if r.ttft_s is not None), slo.ttft_percentile / 100
            )
        if slo.tpot_percentile != P95:
            at_slo["tpot_slo_percentile"] = slo.tpot_percentile
            at_slo["tpot_slo_s"] = mixture_quantile(
                ((r.served, r.tpot_s) for r in recs if r.tpot_s is not None), slo.tpot_percentile / 100
            )
        spec_w = [(r.output_tokens, r.spec_acceptance) for r in recs if r.spec_acceptance is not None]
        spec_tokens = sum(w for w, _ in spec_w)
        spec = sum(w * a for w, a in spec_w if a is not None) / spec_tokens if spec_tokens > 0 else None
        return VariantStats(
            variant=name,
            requests=requests,
            errors=errors,
            ttft_p95_s=ttft,
            tpot_p95_s=tpot,
            **at_slo,
            output_tokens_per_s=tokens / seconds,
            good_requests=good,
            spec_acceptance_rate=min(1.0, spec) if spec is not None else None,
        )


def _present(name: str, ticks: list[FleetTick]) -> bool:
    return any(name in t.variants and (t.variants[name].replicas or t.variants[name].requests) for t in ticks)


def _dominant_window(ticks: list[FleetTick]) -> TimeWindow | None:
    seconds: dict[str, float] = {}
    by_name: dict[str, TimeWindow] = {}
    for t in ticks:
        if t.shape.window is not None:
            seconds[t.shape.window.name] = seconds.get(t.shape.window.name, 0.0) + t.seconds
            by_name[t.shape.window.name] = t.shape.window
    if not seconds:
        return None
    return by_name[max(seconds, key=lambda name: seconds[name])]


def _with_problems(stats: VariantStats) -> VariantStats:
    """The variant with each SLO signal that is not a finite number recorded in ``problems`` (as the Prometheus
    adapter records it) instead of passed on: a p95 without served requests is ``missing``; NaN and infinite values
    are ``nan``/``inf`` (the simulator has no histogram buckets, so nothing is ever ``beyond-top-bucket``)."""
    problems = list(stats.problems)
    update: dict[str, object] = {}

    def check(signal: VariantSignal, field: str, value: float | None, fallback: float | None) -> None:
        if value is None:
            if stats.requests > 0:
                problems.append(DataProblem(signal=signal, kind="missing"))
        elif not math.isfinite(value):
            problems.append(DataProblem(signal=signal, kind="nan" if math.isnan(value) else "inf"))
            update[field] = fallback

    check("ttft_p95", "ttft_p95_s", stats.ttft_p95_s, None)
    check("tpot_p95", "tpot_p95_s", stats.tpot_p95_s, None)
    if stats.ttft_slo_percentile is not None:
        check("ttft_slo", "ttft_slo_s", stats.ttft_slo_s, None)
    if stats.tpot_slo_percentile is not None:
        check("tpot_slo", "tpot_slo_s", stats.tpot_slo_s, None)
    check("output_tokens_per_s", "output_tokens_per_s", stats.output_tokens_per_s, 0.0)
    if len(problems) == len(stats.problems):
        return stats
    return stats.model_copy(update={**update, "problems": tuple(problems)})


def _require_finite(target: TargetRef, *values: float | None) -> None:
    for v in values:
        if v is not None and not math.isfinite(v):
            raise MetricsUnavailable(f"{target}: metrics answered NaN/Inf; not trusting this window")


class SimulatedRouter:
    """TrafficRouter over the fleet's weighted route (one route per fleet; ``target`` is informational)."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet
        self.history: list[tuple[datetime, int]] = []

    def get_weight(self, target: TargetRef) -> int:
        return self.fleet.candidate_weight

    def set_weight(self, target: TargetRef, candidate_weight: int) -> None:
        self.fleet.set_weight(check_weight(candidate_weight))
        self.history.append((self.fleet.clock.now(), candidate_weight))


class SimulatedCluster:
    """Cluster over the fleet: variants start cold on the fleet; every call and event is recorded."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet
        self.calls: list[ClusterCall] = []
        self.events: list[RecordedEvent] = []
        self.autoscalers: dict[str, str] = {}
        """``{"ns/name": "HorizontalPodAutoscaler/x"}``: external autoscalers owning a target's replicas."""

    def deploy(self, target: TargetRef, variant: str, config: EngineConfig, replicas: int) -> None:
        self.calls.append(ClusterCall("deploy", target, check_variant(variant), config, replicas))
        self.fleet.deploy(variant, config, replicas)

    def scale(self, target: TargetRef, variant: str, replicas: int) -> None:
        self.calls.append(ClusterCall("scale", target, check_variant(variant), replicas=replicas))
        self.fleet.scale(variant, replicas)

    def retire(self, target: TargetRef, variant: str) -> None:
        self.calls.append(ClusterCall("retire", target, check_variant(variant)))
        self.fleet.retire(variant)

    def promote(self, target: TargetRef) -> None:
        self.calls.append(ClusterCall("promote", target, "candidate"))
        self.fleet.promote()

    def external_autoscaler(self, target: TargetRef) -> str | None:
        """An HPA/KEDA object set on this cluster by a test or the operator's user (``None``: Shiftlight scales)."""
        return self.autoscalers.get(str(target))

    def ready_replicas(self, target: TargetRef, variant: str) -> int:
        return self.fleet.ready_replicas(check_variant(variant))

    def record_event(
        self, target: TargetRef, reason: str, message: str, *, warning: bool = False, action: str = ""
    ) -> None:
        self.calls.append(ClusterCall("event", target, detail=f"{reason}: {message}"))
        self.events.append(RecordedEvent(target, reason, message, warning, self.fleet.clock.now(), action))


class SimulatedForecaster:
    """Forecaster over the simulator's traffic generator: what weeks of history would show for each window.

    A window's forecast is its busy-hour shape: the noise-free shape, sampled every 15 minutes, with the most
    requests in flight.
    """

    def __init__(self, traffic: DiurnalTraffic) -> None:
        self.traffic = traffic

    def profile_state(self) -> TrafficProfile | None:
        return None  # the generator is the history; nothing to keep

    def restore(self, profile: TrafficProfile) -> None:
        pass

    def window_shapes(
        self, target: TargetRef, *, windows: Sequence[TimeWindow], now: datetime
    ) -> dict[str, TrafficShape]:
        shapes: dict[str, TrafficShape] = {}
        for window in windows:
            samples = max(1, round(window.hours * 4))
            candidates = [
                self.traffic.shape_at_hour(
                    window.start_hour + (i + 0.5) * window.hours / samples, day_of_week=now.weekday(), noise=False
                )
                for i in range(samples)
            ]
            busiest = max(candidates, key=lambda s: s.concurrency)
            if busiest.concurrency > 0:
                shapes[window.name] = busiest
        return shapes
