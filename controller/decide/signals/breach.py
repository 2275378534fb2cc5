"""Whether the active config is breaching the SLO right now, from the stable variant's production signals. Pure.

With at least ``min_samples`` requests in the observe window the SLO's own percentiles are read (TTFT and TPOT each
at the percentile its SLO names). A quiet window (a night of long documents brings a few dozen requests in five
minutes) has too few requests for a percentile, yet it can still breach plainly: 20 of 40 requests outside an SLO
that lets 2 % miss. There the count of requests that missed (and of errors) is weighed against the share the SLO
allows: a breach when that many would come by chance less than once in a thousand windows if the SLO held. Missing,
NaN or infinite signals never make a breach and never clear one; a percentile beyond the histogram's top bucket is
larger than any bound: a breach."""

from __future__ import annotations

import math

from controller.decide.signals.latency import judged_latency
from controller.domain.observation import P95, LatencyMetric, Observation, VariantStats
from controller.domain.slo import SLO

#: Fewest finished requests before their count of misses is weighed at all.
MIN_COUNTED_REQUESTS = 10
#: A breach when the misses observed would come by chance with at most this probability if the SLO held.
BREACH_CHANCE = 1e-3


def allowed_miss_share(slo: SLO) -> float:
    """The largest share of requests that may miss the SLO while both percentiles hold: a request misses when its
    TTFT or its TPOT is over its bound, so at most the sum of what each percentile lets through."""
    return min(1.0, (100 - slo.ttft_percentile) / 100 + (100 - slo.tpot_percentile) / 100)


def chance_of_at_least(misses: int, requests: int, share: float) -> float:
    """P(X >= misses) for X ~ Binomial(requests, share)."""
    if misses <= 0:
        return 1.0
    if share <= 0:
        return 0.0
    if share >= 1:
        return 1.0
    log_share, log_rest = math.log(share), math.log1p(-share)

    def log_term(k: int) -> float:
        log_comb = math.lgamma(requests + 1) - math.lgamma(k + 1) - math.lgamma(requests - k + 1)
        return log_comb + k * log_share + (requests - k) * log_rest

    return min(1.0, sum(math.exp(log_term(k)) for k in range(misses, requests + 1)))


def _latency_breaches(stable: VariantStats, slo: SLO) -> list[str]:
    out = []
    checks: tuple[tuple[str, LatencyMetric, float, float], ...] = (
        ("TTFT", "ttft", slo.ttft_seconds, slo.ttft_percentile),
        ("TPOT", "tpot", slo.tpot_seconds, slo.tpot_percentile),
    )
    for name, metric, bound, percentile in checks:
        value, _ = judged_latency(stable, metric, percentile)
        label, note = f"{name} p{percentile:g}", ""
        if value is None and percentile > P95:
            # the tail the SLO is on lies above a p95 that is already over the bound
            value, _ = judged_latency(stable, metric, P95)
            label, note = f"{name} p95", f" (the SLO is on p{percentile:g})"
        if value is not None and value > bound:
            out.append(f"{label} {_fmt(value, metric)} > {_fmt(bound, metric)}{note}")
    return out


def _fmt(seconds: float, metric: LatencyMetric) -> str:
    if math.isinf(seconds):
        return "beyond the histogram's top bucket"
    return f"{seconds:.2f} s" if metric == "ttft" else f"{seconds * 1000:.0f} ms"


def _counted_breaches(stable: VariantStats, slo: SLO) -> list[str]:
    n, out = stable.requests, []
    share = allowed_miss_share(slo)
    good = stable.good_requests
    if good is not None and stable.problem("good_requests") is None and good <= n:
        missed = n - good
        if chance_of_at_least(missed, n, share) < BREACH_CHANCE:
            out.append(f"{missed} of {n} requests missed the SLO (at most {share:.0%} may)")
    if stable.problem("errors") is None and chance_of_at_least(stable.errors, n, slo.max_error_rate) < BREACH_CHANCE:
        out.append(f"{stable.errors} of {n} requests failed (error rate at most {slo.max_error_rate:.1%})")
    return out


def slo_breach(observation: Observation, slo: SLO, min_samples: int) -> str:
    """Why the stable variant is breaching the SLO right now (empty when it is not, or too few requests to say)."""
    stable = observation.variants.get("stable")
    if stable is None or stable.problem("requests") is not None:
        return ""
    if stable.requests >= min_samples:
        problems = _latency_breaches(stable, slo)
        if stable.problem("errors") is None and stable.error_rate > slo.max_error_rate:
            problems.append(f"error rate {stable.error_rate:.1%} > {slo.max_error_rate:.1%}")
    elif stable.requests >= MIN_COUNTED_REQUESTS:
        problems = _counted_breaches(stable, slo)
    else:
        return ""
    if not problems:
        return ""
    return f"SLO breach on the active config over {stable.requests} requests: " + "; ".join(problems)


__all__ = ["BREACH_CHANCE", "MIN_COUNTED_REQUESTS", "allowed_miss_share", "chance_of_at_least", "slo_breach"]
