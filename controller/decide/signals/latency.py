"""Which latency a check judges: a variant's latency at a percentile, +inf beyond the histogram's top bucket, or why
it cannot be judged. Pure; read by the rollout analysis and the production SLO-breach check."""

from __future__ import annotations

import math

from controller.domain.observation import DataProblem, LatencyMetric, VariantStats


def judged_latency(
    stats: VariantStats | None, metric: LatencyMetric, percentile: float
) -> tuple[float | None, DataProblem | None]:
    """``metric`` at ``percentile`` to judge (+inf when it lies beyond the histogram's top bucket: larger than any
    bound), or None with the reason it cannot be judged (no reason without ``stats``)."""
    if stats is None:
        return None, None
    signal, value = stats.at_percentile(metric, percentile)
    problem = stats.problem(signal)
    if problem is not None:
        return (math.inf, None) if problem.kind == "beyond-top-bucket" else (None, problem)
    if value is None:
        return None, DataProblem(signal=signal, kind="missing")
    if not math.isfinite(value):  # an infinite number that does not say it is a percentile beyond the top bucket
        return None, DataProblem(signal=signal, kind="inf")
    return value, None
