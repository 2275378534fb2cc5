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


#: Sigma grid for the log-normal fit: 0.01 .. 3 (cv 0.01 .. 90), log-spaced.
_SIGMAS: tuple[float, ...] = tuple(0.01 * (300.0 ** (i / 199)) for i in range(200))


def _loglik(sigma: float, mean: float, bounds: Sequence[float], counts: Sequence[float], correction: float) -> float:
    mu = math.log(mean) - sigma * sigma / 2
    total = 0.0
    previous_cdf = 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if math.isinf(bound):
            cdf = 1.0
        else:
            upper = bound + correction
            cdf = _phi((math.log(upper) - mu) / sigma) if upper > 0 else 0.0
        p = cdf - previous_cdf
        previous_cdf = cdf
        if count > 0:
            total += count * math.log(max(p, 1e-300))
    return total


def lognormal_cv(buckets: Buckets, mean: float, *, integer_valued: bool = True) -> float:
    """Maximum-likelihood cv of a log-normal with the given ``mean`` fitted to ``buckets``.

    Among sigmas whose likelihood is within 1e-6 (relative) of the best, the smallest wins: when all requests sit in
    one bucket, the data cannot tell cv=0 from cv=0.1, and the simplest answer is reported.
    """
    if mean <= 0 or buckets.total <= 0:
        raise ValueError("cv needs a positive mean and at least one request")
    correction = 0.5 if integer_valued else 0.0
    scores = [_loglik(s, mean, buckets.bounds, buckets.counts, correction) for s in _SIGMAS]
    best = max(scores)
    tolerance = max(abs(best) * 1e-6, 1e-9)
    sigma = next(s for s, score in zip(_SIGMAS, scores, strict=True) if score >= best - tolerance)
    if sigma <= _SIGMAS[0]:
        return 0.0
    return math.sqrt(math.expm1(sigma * sigma))
