"""The expressions only the Grafana dashboard plots, beyond the observe cycle's: prompt and output size quantiles,
per-variant arrival and error rates, the share of requests within an SLO bound, preemptions, and the operator's own
metrics. :func:`dashboard_queries` is everything the dashboard may plot (:mod:`controller.observe.dashboard` renders
it), the observe cycle's queries from :mod:`controller.observe.queries` first.
"""

from __future__ import annotations

from controller.observe.promql import (
    DEFAULT_VARIANT_LABEL,
    GENERATION_TOKENS,
    PREEMPTIONS,
    PROMPT_TOKENS,
    REQUEST_SUCCESS,
    SHIFTLIGHT_DECISIONS,
    SHIFTLIGHT_ROLLOUT_WEIGHT,
    SHIFTLIGHT_TRIALS,
    TPOT,
    TTFT,
    Query,
    Selector,
    check_label_name,
    error_matcher,
    escape_label_value,
    histogram_quantile,
    increase,
    quantile_name,
    rate,
    ratio,
    series,
)
from controller.observe.queries import observe_queries


def slo_good_ratio(histogram: str, selector: Selector, rng: str, bound_s: str, variant_label: str) -> str:
    """Share of requests whose ``histogram`` value is at most the bucket bound ``bound_s`` (a Grafana variable or
    a bucket boundary literal such as ``"2.5"``)."""
    v = (check_label_name(variant_label),)
    num = increase(f"{histogram}_bucket", selector, rng, v, (f'le="{escape_label_value(bound_s)}"',))
    den = increase(f"{histogram}_count", selector, rng, v)
    return ratio(num, den)


def shiftlight_queries(selector: Selector, rng: str) -> tuple[Query, ...]:
    """The operator's own metrics, filtered to the target by the ``model`` / ``namespace`` labels it exports."""
    ops = Selector(
        model_name=selector.model_name,
        namespace=selector.namespace,
        model_label="model",
        namespace_label="namespace",
    )
    return (
        Query(
            "shiftlight_decisions",
            increase(SHIFTLIGHT_DECISIONS, ops, rng, ("decision",)),
            "series",
            "decisions taken by the operator, by kind",
        ),
        Query(
            "shiftlight_rollout_weight",
            f"max by (variant) ({series(SHIFTLIGHT_ROLLOUT_WEIGHT, ops)})",
            "series",
            "percent of traffic routed to the candidate",
            unit="percent",
        ),
        Query(
            "shiftlight_trials",
            increase(SHIFTLIGHT_TRIALS, ops, rng, ("outcome",)),
            "series",
            "canary trials run, by outcome",
        ),
    )


def dashboard_queries(
    selector: Selector,
    rng: str,
    variant_label: str = DEFAULT_VARIANT_LABEL,
    ttft_bound: str = "$ttft_bound",
    tpot_bound: str = "$tpot_bound",
) -> tuple[Query, ...]:
    """Everything the Grafana dashboard may plot: the observe queries plus views only a human needs."""
    s, r = selector, rng
    v = (check_label_name(variant_label),)
    extra = [
        Query(
            f"{name}_{quantile_name(qq)}",
            histogram_quantile(qq, metric, s, r),
            "series",
            f"{name.replace('_', ' ')} {qq} quantile (coarse 1-2-5 buckets: interpolated inside a bucket)",
            unit="tokens",
        )
        for name, metric in (("prompt_tokens", PROMPT_TOKENS), ("output_tokens", GENERATION_TOKENS))
        for qq in (0.5, 0.9)
    ]
    extra += [
        Query(
            "v_arrival_rate",
            rate(REQUEST_SUCCESS, s, r, v),
            "series",
            "finished requests per second per variant",
            unit="req/s",
        ),
        Query(
            "v_error_ratio",
            ratio(
                rate(REQUEST_SUCCESS, s, r, v, (error_matcher(),)),
                rate(REQUEST_SUCCESS, s, r, v),
            ),
            "series",
            "share of requests finished with an error/abort per variant",
        ),
        Query(
            "v_ttft_good_ratio",
            slo_good_ratio(TTFT, s, r, ttft_bound, variant_label),
            "series",
            "share of requests with TTFT within the bound (a TTFT bucket boundary)",
        ),
        Query(
            "v_tpot_good_ratio",
            slo_good_ratio(TPOT, s, r, tpot_bound, variant_label),
            "series",
            "share of requests with TPOT within the bound (a TPOT bucket boundary)",
        ),
        Query(
            "preemptions_per_s",
            rate(PREEMPTIONS, s, r),
            "series",
            "preemptions per second",
        ),
    ]
    return observe_queries(s, r, variant_label) + tuple(extra) + shiftlight_queries(s, r)
