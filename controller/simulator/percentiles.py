"""Latency distributions given by percentiles: a piecewise-linear distribution through p50/p95/p99, the share of
requests within a bound (:func:`fraction_within`), the quantile of a weighted mixture (:func:`mixture_quantile`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from controller.domain.trial import Percentiles


def _quantile_points(p: Percentiles) -> tuple[tuple[float, float], ...]:
    """(probability, value) knots of a piecewise-linear distribution through p50/p95/p99.

    Below the median the spread mirrors the p50..p95 slope (floored at 0); above p99 the last 1 % spans as much as
    p95..p99 did, a conservative tail.
    """
    lo = max(0.0, p.p50 - (p.p95 - p.p50) * 50 / 45)
    hi = p.p99 + (p.p99 - p.p95)
    return ((0.0, lo), (0.50, p.p50), (0.95, p.p95), (0.99, p.p99), (1.0, hi))


def _cdf(pts: tuple[tuple[float, float], ...], x: float) -> float:
    if x < pts[0][1]:
        return 0.0
    if x >= pts[-1][1]:
        return 1.0
    for (q0, v0), (q1, v1) in itertools.pairwise(pts):
        if x < v1:
            return q0 + (q1 - q0) * (x - v0) / (v1 - v0) if x >= v0 else q0
    return 1.0  # unreachable: x < pts[-1][1]


def fraction_within(p: Percentiles, limit: float) -> float:
    """Share of requests whose value is <= ``limit`` under the distribution through ``p``'s percentiles."""
    return _cdf(_quantile_points(p), limit)


def mixture_quantile(parts: Iterable[tuple[float, Percentiles]], q: float) -> float | None:
    """The ``q``-quantile (0..1) of a weighted mixture of distributions given by percentiles.

    Exact for the piecewise-linear distributions of :func:`fraction_within`: the mixture's CDF is linear between
    the components' knots, so a binary search over the sorted knots finds the segment and interpolation the value.
    """
    items = [(w, _quantile_points(p)) for w, p in parts if w > 0]
    if not items:
        return None
    total = sum(w for w, _ in items)

    def cdf(x: float) -> float:
        return sum(w * _cdf(pts, x) for w, pts in items) / total

    xs = sorted({v for _, pts in items for _, v in pts})
    lo, hi = 0, len(xs) - 1
    if cdf(xs[0]) >= q:
        return xs[0]
    while hi - lo > 1:  # invariant: cdf(xs[lo]) < q <= cdf(xs[hi])
        mid = (lo + hi) // 2
        if cdf(xs[mid]) >= q:
            hi = mid
        else:
            lo = mid
    f_lo, f_hi = cdf(xs[lo]), cdf(xs[hi])
    if f_hi <= f_lo:
        return xs[hi]
    return xs[lo] + (xs[hi] - xs[lo]) * (q - f_lo) / (f_hi - f_lo)


def scaled(p: Percentiles | None, factor: float) -> Percentiles | None:
    if p is None or factor == 1.0:
        return p
    return Percentiles(p50=p.p50 * factor, p95=p.p95 * factor, p99=p.p99 * factor)


__all__ = ["fraction_within", "mixture_quantile", "scaled"]
