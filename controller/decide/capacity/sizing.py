"""Capacity-based replica counts: forecast load over measured per-replica capacity at the SLO, and the search
that measures that capacity on the canary. Pure.

Ray Serve style: a pure policy (``desired = ceil(load * (1 + headroom) / capacity)``) wrapped by guardrails
(bounds, a scale-down stabilisation window, and deference to an HPA/KEDA object that already owns the workload).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from controller.decide.rules import ProbeRules, ScalingRules
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult


@dataclass(frozen=True)
class ScalingDecision:
    replicas: int
    """Replica count to apply; equal to ``current`` when nothing should change."""
    reason: str
    below_since: datetime | None
    """When desired first fell below current (carried in status for the stabilisation window)."""

    def changes(self, current: int) -> bool:
        return self.replicas != current


def replicas_for(rate: float, capacity_per_replica: float, rules: ScalingRules) -> int:
    """Unbounded replica count for ``rate`` with the rules' headroom at ``capacity_per_replica`` (same unit)."""
    return math.ceil(rate * (1 + rules.headroom) / capacity_per_replica - 1e-9) if rate > 0 else 0


def leading_rate(observed: float, end_rate: float | None, *, lead_s: float, remaining_s: float) -> float:
    """The load expected ``lead_s`` from now while it rises from ``observed`` towards ``end_rate``, the load
    forecast for the window's end ``remaining_s`` from now (a straight line there; ``end_rate`` itself once the
    end is within the lead); ``observed`` when no rise is forecast."""
    if end_rate is None or end_rate <= observed or lead_s <= 0:
        return observed
    if remaining_s <= lead_s:
        return end_rate
    return observed + (end_rate - observed) * lead_s / remaining_s


def desired_replicas(
    *,
    forecast_rps: float,
    capacity_rps_per_replica: float,
    current: int,
    rules: ScalingRules,
    now: datetime,
    below_since: datetime | None = None,
    external_autoscaler: str | None = None,
    unit: str = "req/s",
) -> ScalingDecision:
    """How many replicas serve ``forecast_rps`` at the SLO, given one replica sustains ``capacity_rps_per_replica``.

    Both are in ``unit``: a request rate, or requests in flight."""
    if external_autoscaler and rules.external_autoscaler_mode == "defer":
        return ScalingDecision(current, f"{external_autoscaler} manages replicas; deferring to it", None)
    if capacity_rps_per_replica <= 0:
        return ScalingDecision(current, "no measured capacity at the SLO yet; keeping the replica count", None)
    raw = replicas_for(forecast_rps, capacity_rps_per_replica, rules)
    bounded = min(max(raw, rules.min_replicas), rules.max_replicas)
    basis = (
        f"load {forecast_rps:.2f} {unit} x {1 + rules.headroom:.2f} headroom / "
        f"{capacity_rps_per_replica:.2f} {unit} per replica at the SLO = {raw}"
    )
    if bounded != raw:
        basis += f", bounded to [{rules.min_replicas}, {rules.max_replicas}]"
    takeover = f" (taking over from {external_autoscaler})" if external_autoscaler else ""
    if bounded > current:
        return ScalingDecision(bounded, f"scale up {current} -> {bounded}: {basis}{takeover}", None)
    if bounded == current:
        return ScalingDecision(current, f"keep {current}: {basis}", None)
    since = below_since or now
    waited = (now - since).total_seconds()
    if waited < rules.scale_down_stabilisation_s:
        return ScalingDecision(
            current,
            f"keep {current} for now: {basis}; scale-down waits {rules.scale_down_stabilisation_s - waited:.0f} s more",
            since,
        )
    return ScalingDecision(bounded, f"scale down {current} -> {bounded}: {basis}{takeover}", None)


# ----- the capacity search (probes on the canary) --------------------------------------------------------------


def holds(trial: TrialResult, *, keeps_up: bool) -> bool:
    """A probed load one replica holds: within the SLO and, for a closed-loop trial (``keeps_up``), keeping up
    with the arrival rate that load brings: closed-loop streams wait for each other, so a replica too slow for
    production's rate can look fine. (An open loop breaks the SLO by itself when the replica falls behind.)"""
    fast_enough = not keeps_up or trial.request_throughput >= 0.97 * trial.shape.arrival_rate_rps
    return trial.ok and trial.meets_slo() and fast_enough


def probe_bracket(held: Sequence[tuple[float, bool]]) -> tuple[float, float | None]:
    """(highest load multiple that held, 0 if none; lowest that did not, None if none) from ``(multiple, held)``."""
    return max((f for f, ok in held if ok), default=0.0), min((f for f, ok in held if not ok), default=None)


def next_probe_factor(
    low: float, high: float | None, *, base_concurrency: float, tried: int, rules: ProbeRules
) -> float | None:
    """The next load multiple to probe given the bracket ``(low, high)``, or None when the search is done."""
    if tried >= rules.max_trials:
        return None
    if high is None:
        factor = low * rules.first_factor
        return None if base_concurrency * factor > rules.max_concurrency else round(factor, 4)
    if low == 0.0:  # missed the SLO at the round's own load: search downwards
        factor = high / rules.first_factor
        return None if base_concurrency * factor < 1 else round(factor, 4)
    if high / low <= rules.precision:
        return None
    return round(math.sqrt(low * high), 4)


def length_distance(a: TrafficShape, b: TrafficShape) -> float:
    """How far apart two length mixes are (sum of absolute log ratios of mean prompt and output lengths)."""
    return abs(math.log(a.prompt_tokens.mean / b.prompt_tokens.mean)) + abs(
        math.log(a.output_tokens.mean / b.output_tokens.mean)
    )
