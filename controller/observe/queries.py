"""The PromQL expressions the operator decides on: one observe cycle's instant queries (the target-wide traffic
shape and serving signals, the per-variant SLO signals, the SLO signal's per-window counts) and the hour-of-week
profile's range queries.

The Prometheus adapter (:mod:`controller.observe.prometheus`) and the hour-of-week profile
(:mod:`controller.observe.profile`) take their expressions from here, and the Grafana dashboard plots them too
(:mod:`controller.observe.dashboard_queries` adds the views only a human needs), so what the operator decides on and
what a human looks at can never disagree.

Expressions are built from a :class:`~controller.observe.promql.Selector` (which target: model name, namespace, extra
deployment labels) and a range (``"300s"``, or a Grafana variable such as ``"$__rate_interval"``). The building
blocks (vLLM's metric names, label escaping, selectors, aggregations, :func:`~controller.observe.promql.batch`) live
in :mod:`controller.observe.promql`.
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
    REQUEST_SUCCESS,
    RUNNING,
    SPEC_ACCEPTED,
    SPEC_ACCEPTED_PER_POS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    TPOT,
    TTFT,
    WAITING,
    Query,
    Selector,
    bucket_increase,
    by_clause,
    check_label_name,
    check_range,
    error_matcher,
    gauge_mean,
    histogram_mean,
    histogram_quantile,
    increase,
    quantile_name,
    rate,
    ratio,
    series,
)


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
            Query(
                f"ttft_{quantile_name(q)}", histogram_quantile(q, TTFT, s, r), "scalar", f"TTFT {q} quantile", unit="s"
            )
        )
    for q in QUANTILES:
        out.append(
            Query(
                f"tpot_{quantile_name(q)}",
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
            increase(REQUEST_SUCCESS, s, r, v, (error_matcher(),)),
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
                f"v_ttft_{quantile_name(q)}",
                histogram_quantile(q, TTFT, s, r, v),
                "by_variant",
                f"TTFT {q} per variant",
                labels=v,
            )
        )
        out.append(
            Query(
                f"v_tpot_{quantile_name(q)}",
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
