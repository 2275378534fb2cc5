"""Every PromQL expression Shiftlight runs, in one place.

The Prometheus adapter (:mod:`controller.observe.prometheus`), the hour-of-week profile
(:mod:`controller.observe.profile`) and the Grafana dashboard (:mod:`controller.observe.dashboard`) all take their
expressions from here, so what the operator decides on and what a human looks at can never disagree.

Expressions are built from a :class:`Selector` (which target: model name, namespace, extra deployment labels) and a
range (``"300s"``, or a Grafana variable such as ``"$__rate_interval"``). The building blocks (vLLM's metric names,
label escaping, selectors, aggregations, :func:`batch`) live in :mod:`controller.observe.promql` and are importable
from here too.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.observe.promql import (
    DEFAULT_VARIANT_LABEL,
    E2E_LATENCY,
    ERROR_FINISH_REASONS,
    GENERATION_TOKENS,
    GENERATION_TOKENS_TOTAL,
    KV_USAGE,
    PREEMPTIONS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_TOKENS,
    QUANTILES,
    QUERY_TAG,
    REQUEST_SUCCESS,
    RUNNING,
    SHIFTLIGHT_DECISIONS,
    SHIFTLIGHT_ROLLOUT_WEIGHT,
    SHIFTLIGHT_TRIALS,
    SPEC_ACCEPTED,
    SPEC_ACCEPTED_PER_POS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    TPOT,
    TTFT,
    WAITING,
    Kind,
    Query,
    Selector,
    batch,
    bucket_increase,
    by_clause,
    check_label_name,
    check_range,
    duration,
    escape_label_value,
    gauge_mean,
    histogram_mean,
    histogram_quantile,
    increase,
    rate,
    ratio,
    series,
)


def _error_matcher() -> str:
    return 'finished_reason=~"' + "|".join(ERROR_FINISH_REASONS) + '"'


def _qname(q: float) -> str:
    return f"p{round(q * 100)}"


def shape_queries(selector: Selector, rng: str) -> tuple[Query, ...]:
    """The target-wide traffic shape and serving signals over ``rng`` ending at the evaluation time."""
    s, r = selector, rng
    out = [
        Query("requests", increase(REQUEST_SUCCESS, s, r), "scalar", "requests finished in the window", True, "req"),
        Query(
            "arrival_rate",
            rate(REQUEST_SUCCESS, s, r),
            "scalar",
            "finished requests per second (= arrival rate in steady state; misses client aborts)",
            True,
            "req/s",
        ),
        Query(
            "concurrency_littles_law",
            rate(f"{E2E_LATENCY}_sum", s, r),
            "scalar",
            "mean requests in the system by Little's law: end-to-end seconds accrued per second",
            True,
        ),
        Query("running_mean", gauge_mean(RUNNING, s, r), "scalar", "mean requests running in the engine", True),
        Query("waiting_mean", gauge_mean(WAITING, s, r), "scalar", "mean requests waiting in the queue", True),
        Query(
            "freshest_sample",
            f"max{by_clause(s.group_by)} (timestamp({series(RUNNING, s)}))",
            "scalar",
            "unix time of the newest running-requests sample (staleness check)",
            True,
            "s",
        ),
        Query(
            "prompt_mean",
            histogram_mean(PROMPT_TOKENS, s, r),
            "scalar",
            "mean prompt tokens per request (_sum / _count)",
            True,
            "tokens",
        ),
        Query(
            "output_mean",
            histogram_mean(GENERATION_TOKENS, s, r),
            "scalar",
            "mean generated tokens per request (_sum / _count)",
            True,
            "tokens",
        ),
        Query(
            "prompt_buckets",
            bucket_increase(PROMPT_TOKENS, s, r),
            "buckets",
            "prompt-length histogram (cumulative counts per le) for cv and quantiles",
            True,
        ),
        Query(
            "output_buckets",
            bucket_increase(GENERATION_TOKENS, s, r),
            "buckets",
            "output-length histogram (cumulative counts per le) for cv and quantiles",
            True,
        ),
    ]
    for q in QUANTILES:
        out.append(
            Query(f"ttft_{_qname(q)}", histogram_quantile(q, TTFT, s, r), "scalar", f"TTFT {q} quantile", unit="s")
        )
    for q in QUANTILES:
        out.append(
            Query(
                f"tpot_{_qname(q)}",
                histogram_quantile(q, TPOT, s, r),
                "scalar",
                f"TPOT (per-request time per output token) {q} quantile",
                unit="s",
            )
        )
    out += [
        Query(
            "output_tokens_per_s",
            rate(GENERATION_TOKENS_TOTAL, s, r),
            "scalar",
            "generated tokens per second (accepted speculative tokens included)",
            unit="tokens/s",
        ),
        Query("spec_drafts", increase(SPEC_DRAFTS, s, r), "scalar", "speculative drafts verified in the window"),
        Query(
            "spec_acceptance_rate",
            ratio(rate(SPEC_ACCEPTED, s, r), rate(SPEC_DRAFT_TOKENS, s, r)),
            "scalar",
            "share of draft tokens accepted",
        ),
        Query(
            "spec_mean_acceptance_length",
            "1 + " + ratio(rate(SPEC_ACCEPTED, s, r), rate(SPEC_DRAFTS, s, r)),
            "scalar",
            "tokens emitted per verification step (accepted drafts + the bonus token)",
            unit="tokens",
        ),
        Query(
            "spec_acceptance_per_position",
            f"{rate(SPEC_ACCEPTED_PER_POS, s, r, ('position',))}"
            f" / on ({', '.join(s.group_by)}) group_left {rate(SPEC_DRAFTS, s, r)}",
            "by_position",
            "acceptance rate of each draft position",
            labels=("position",),
        ),
        Query(
            "spec_accepted_share",
            ratio(rate(SPEC_ACCEPTED, s, r), rate(GENERATION_TOKENS_TOTAL, s, r)),
            "scalar",
            "accepted draft tokens / output tokens (with a lookup drafter: share of output copied from context)",
        ),
        Query(
            "prefix_cache_hit_rate",
            ratio(rate(PREFIX_HITS, s, r), rate(PREFIX_QUERIES, s, r)),
            "scalar",
            "share of queried prompt tokens found in the prefix cache",
        ),
        Query("preemptions", increase(PREEMPTIONS, s, r), "scalar", "requests preempted in the window"),
        Query(
            "kv_usage_mean",
            f"avg{by_clause(s.group_by)} (avg_over_time({series(KV_USAGE, s)}[{check_range(r)}]))",
            "scalar",
            "mean KV-cache usage (0-1) across replicas",
        ),
        Query(
            "kv_usage_max",
            f"max{by_clause(s.group_by)} (max_over_time({series(KV_USAGE, s)}[{check_range(r)}]))",
            "scalar",
            "peak KV-cache usage (0-1) of any replica",
        ),
    ]
    return tuple(out)


def variant_queries(selector: Selector, rng: str, variant_label: str = DEFAULT_VARIANT_LABEL) -> tuple[Query, ...]:
    """Per-variant SLO signals, grouped by ``variant_label``."""
    s, r, v = selector, rng, (check_label_name(variant_label),)
    out = [
        Query(
            "v_requests",
            increase(REQUEST_SUCCESS, s, r, v),
            "by_variant",
            "requests finished per variant",
            True,
            labels=v,
        ),
        Query(
            "v_errors",
            increase(REQUEST_SUCCESS, s, r, v, (_error_matcher(),)),
            "by_variant",
            f"requests finished with reason {'/'.join(ERROR_FINISH_REASONS)} per variant",
            labels=v,
        ),
        Query(
            "v_output_tokens_per_s",
            rate(GENERATION_TOKENS_TOTAL, s, r, v),
            "by_variant",
            "generated tokens per second per variant",
            labels=v,
        ),
        Query(
            "v_spec_acceptance_rate",
            ratio(rate(SPEC_ACCEPTED, s, r, v), rate(SPEC_DRAFT_TOKENS, s, r, v)),
            "by_variant",
            "draft-token acceptance per variant",
            labels=v,
        ),
        Query(
            "v_ttft_buckets",
            bucket_increase(TTFT, s, r, v),
            "buckets",
            "TTFT histogram per variant (good-request counts)",
            labels=(*v, "le"),
        ),
        Query(
            "v_tpot_buckets",
            bucket_increase(TPOT, s, r, v),
            "buckets",
            "TPOT histogram per variant (good-request counts)",
            labels=(*v, "le"),
        ),
    ]
    for q in QUANTILES:
        out.append(
            Query(
                f"v_ttft_{_qname(q)}",
                histogram_quantile(q, TTFT, s, r, v),
                "by_variant",
                f"TTFT {q} per variant",
                labels=v,
            )
        )
        out.append(
            Query(
                f"v_tpot_{_qname(q)}",
                histogram_quantile(q, TPOT, s, r, v),
                "by_variant",
                f"TPOT {q} per variant",
                labels=v,
            )
        )
    return tuple(out)


def slo_count_queries(
    selector: Selector, windows: Iterable[str], variant_label: str = DEFAULT_VARIANT_LABEL
) -> tuple[Query, ...]:
    """Per window and variant: finished requests and the TTFT/TPOT histograms the good-request share is read from
    (inputs of the burn-rate SLO signal). Names carry the window: ``v_requests@300s``."""
    out: list[Query] = []
    for window in windows:
        for query in variant_queries(selector, window, variant_label):
            if query.name in ("v_requests", "v_ttft_buckets", "v_tpot_buckets"):
                out.append(
                    Query(
                        f"{query.name}@{window}",
                        query.expr,
                        query.kind,
                        f"{query.description} over {window}",
                        query.required,
                        query.unit,
                        query.labels,
                    )
                )
    return tuple(out)


def observe_queries(selector: Selector, rng: str, variant_label: str = DEFAULT_VARIANT_LABEL) -> tuple[Query, ...]:
    return shape_queries(selector, rng) + variant_queries(selector, rng, variant_label)


# ---- range queries for the hour-of-week profile --------------------------------------------------------------


def profile_queries(selector: Selector, step: str) -> tuple[Query, ...]:
    """Series sampled every ``step`` over weeks of history; each point summarises the preceding ``step``."""
    s, r = selector, step
    return (
        Query("arrival_rate", rate(REQUEST_SUCCESS, s, r), "scalar", "finished requests per second", True, "req/s"),
        Query("concurrency", rate(f"{E2E_LATENCY}_sum", s, r), "scalar", "Little's-law concurrency", True),
        Query("prompt_mean", histogram_mean(PROMPT_TOKENS, s, r), "scalar", "mean prompt tokens", True, "tokens"),
        Query("output_mean", histogram_mean(GENERATION_TOKENS, s, r), "scalar", "mean output tokens", True, "tokens"),
    )


# ---- dashboard-only expressions --------------------------------------------------------------------------------


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
            f"{name}_{_qname(qq)}",
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
                rate(REQUEST_SUCCESS, s, r, v, (_error_matcher(),)),
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


__all__ = [
    "DEFAULT_VARIANT_LABEL",
    "E2E_LATENCY",
    "ERROR_FINISH_REASONS",
    "GENERATION_TOKENS",
    "GENERATION_TOKENS_TOTAL",
    "KV_USAGE",
    "PREEMPTIONS",
    "PREFIX_HITS",
    "PREFIX_QUERIES",
    "PROMPT_TOKENS",
    "QUANTILES",
    "QUERY_TAG",
    "REQUEST_SUCCESS",
    "RUNNING",
    "SHIFTLIGHT_DECISIONS",
    "SHIFTLIGHT_ROLLOUT_WEIGHT",
    "SHIFTLIGHT_TRIALS",
    "SPEC_ACCEPTED",
    "SPEC_ACCEPTED_PER_POS",
    "SPEC_DRAFTS",
    "SPEC_DRAFT_TOKENS",
    "TPOT",
    "TTFT",
    "WAITING",
    "Kind",
    "Query",
    "Selector",
    "batch",
    "bucket_increase",
    "by_clause",
    "check_label_name",
    "check_range",
    "dashboard_queries",
    "duration",
    "escape_label_value",
    "gauge_mean",
    "histogram_mean",
    "histogram_quantile",
    "increase",
    "observe_queries",
    "profile_queries",
    "rate",
    "ratio",
    "series",
    "shape_queries",
    "shiftlight_queries",
    "slo_count_queries",
    "slo_good_ratio",
    "variant_queries",
]
