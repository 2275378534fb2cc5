"""Reading Prometheus histograms: cumulative ``le`` buckets -> counts, quantiles, cv and good-request counts.

vLLM's length histograms use a coarse 1-2-5 bucket series (1, 2, 5, 10, 20, 50, 100, ...), so a quantile read by
linear interpolation inside e.g. the 200-500 bucket can be off by a factor of two. The means come from
``_sum / _count`` and are exact. The spread (coefficient of variation) is estimated here by maximum likelihood: a
log-normal with the *known* mean is fitted to the bucket counts, with sigma the only free parameter. Token counts are
integers and ``le`` is inclusive, so bucket bounds get a half-token continuity correction. Limits, documented in
``docs/observe.md``: lengths spread inside a single bucket read as cv ~ 0, and the answer is only as good as the
log-normal assumption; the fit is used for the shape's ``cv``, never for decisions on its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Buckets:
    """Non-cumulative counts per bucket: ``counts[i]`` requests in ``(bounds[i-1], bounds[i]]``; last bound is inf."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]

    @property
    def total(self) -> float:
        return sum(self.counts)

    @classmethod
    def from_cumulative(cls, cumulative: Mapping[float, float]) -> Buckets:
        """From Prometheus ``le -> cumulative count`` (must contain ``+Inf``). Small negative steps from counter
        resets and extrapolation are clipped to zero."""
        if not cumulative or not math.isinf(max(cumulative)):
            raise ValueError("histogram has no +Inf bucket")
        bounds = tuple(sorted(cumulative))
        counts: list[float] = []
        previous = 0.0
        for b in bounds:
            c = cumulative[b]
            if math.isnan(c):
                raise ValueError(f"bucket le={b} is NaN")
            counts.append(max(c - previous, 0.0))
            previous = max(previous, c)
        return cls(bounds, tuple(counts))

    def quantile(self, q: float) -> float:
        """``histogram_quantile`` semantics: linear interpolation inside the bucket holding rank ``q * total``;
        the first bucket interpolates from 0, a rank in the ``+Inf`` bucket answers the largest finite bound."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile {q} outside [0, 1]")
        total = self.total
        if total <= 0:
            return math.nan
        rank = q * total
        cumulative = 0.0
        lower = 0.0
        for bound, count in zip(self.bounds, self.counts, strict=True):
            if cumulative + count >= rank and count > 0:
                if math.isinf(bound):
                    return lower
                return lower + (bound - lower) * (rank - cumulative) / count
            cumulative += count
            if not math.isinf(bound):
                lower = bound
        return lower

    def count_at_most(self, value: float) -> float:
        """Requests certainly at or below ``value``: those in buckets whose upper bound is <= ``value``
        (a conservative count when ``value`` falls inside a bucket)."""
        return sum(c for b, c in zip(self.bounds, self.counts, strict=True) if b <= value)


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


#: Coarse sigma grid for the log-normal fit: 1e-5 .. 3 (cv ~0 .. 90), log-spaced; refined by golden section. The tiny
#: end matters for lengths sitting exactly on a bucket bound, where the half-token correction is a 1e-3 relative step.
_SIGMAS: tuple[float, ...] = tuple(1e-5 * (3e5 ** (i / 59)) for i in range(60))
_GOLDEN = (math.sqrt(5) - 1) / 2


def _loglik(sigma: float, mean: float, cells: Sequence[tuple[float, float, float]]) -> float:
    """Log-likelihood of the non-empty cells ``(log lower, log upper, count)`` under log-normal(mean, sigma)."""
    mu = math.log(mean) - sigma * sigma / 2
    total = 0.0
    for lo, hi, count in cells:
        p_hi = 1.0 if math.isinf(hi) else _phi((hi - mu) / sigma)
        p_lo = 0.0 if math.isinf(lo) else _phi((lo - mu) / sigma)
        total += count * math.log(max(p_hi - p_lo, 1e-300))
    return total


def lognormal_cv(buckets: Buckets, mean: float, *, integer_valued: bool = True) -> float:
    """Maximum-likelihood cv of a log-normal with the given ``mean`` fitted to ``buckets``.

    A coarse grid finds the best sigma (among near-ties the smallest wins: when all requests sit in one bucket the
    data cannot tell cv=0 from cv=0.1, and the simplest answer is reported); a golden-section search refines it.
    """
    if mean <= 0 or buckets.total <= 0:
        raise ValueError("cv needs a positive mean and at least one request")
    correction = 0.5 if integer_valued else 0.0
    cells: list[tuple[float, float, float]] = []
    lower = 0.0
    for bound, count in zip(buckets.bounds, buckets.counts, strict=True):
        upper = bound + correction
        if count > 0:
            lo = math.log(lower) if lower > 0 else -math.inf
            hi = math.inf if math.isinf(bound) else (math.log(upper) if upper > 0 else -math.inf)
            cells.append((lo, hi, count))
        lower = upper

    def score(sigma: float) -> float:
        return _loglik(sigma, mean, cells)

    scores = [score(s) for s in _SIGMAS]
    best = max(scores)
    tolerance = max(abs(best) * 1e-6, 1e-9)
    index = next(i for i, sc in enumerate(scores) if sc >= best - tolerance)
    if index == 0:
        return 0.0
    if scores[index] < best:  # a near-tie plateau: keep the smallest sigma as is
        sigma = _SIGMAS[index]
    else:
        a, b = _SIGMAS[index - 1], _SIGMAS[min(index + 1, len(_SIGMAS) - 1)]
        for _ in range(25):
            c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
            if score(c) >= score(d):
                b = d
            else:
                a = c
        sigma = (a + b) / 2
    return math.sqrt(math.expm1(sigma * sigma))
