"""Every PromQL expression Shiftlight runs, in one place.

The Prometheus adapter (:mod:`controller.observe.prometheus`), the hour-of-week profile
(:mod:`controller.observe.profile`) and the Grafana dashboard (:mod:`controller.observe.dashboard`) all take their
expressions from here, so what the operator decides on and what a human looks at can never disagree.

Expressions are built from a :class:`Selector` (which target: model name, namespace, extra deployment labels) and a
range (``"300s"``, or a Grafana variable such as ``"$__rate_interval"``). Label values are escaped as PromQL string
literals, so quotes, braces, backslashes or newlines in a model name cannot change the query's structure. Label names
are checked against Prometheus' label-name grammar.

Metric names are vLLM's own (``vllm/v1/metrics/loggers.py``, ``vllm/v1/spec_decode/metrics.py``); counters carry the
``_total`` suffix that ``prometheus_client`` appends when they are scraped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

#: Label that tags each sub-query's result inside a batched query (see :func:`batch`).
QUERY_TAG = "shiftlight_query"
#: Default label carrying the variant (``stable`` / ``candidate``), relabelled from a pod label at scrape time.
DEFAULT_VARIANT_LABEL = "variant"
#: Finish reasons counted as failed requests.
ERROR_FINISH_REASONS = ("error", "abort")
QUANTILES = (0.5, 0.95, 0.99)

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_RANGE = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$|^\$\{?__\w+\}?$|^\$\w+$")

# vLLM metric names (scraped form).
REQUEST_SUCCESS = "vllm:request_success_total"
E2E_LATENCY = "vllm:e2e_request_latency_seconds"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PROMPT_TOKENS = "vllm:request_prompt_tokens"
GENERATION_TOKENS = "vllm:request_generation_tokens"
TTFT = "vllm:time_to_first_token_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
GENERATION_TOKENS_TOTAL = "vllm:generation_tokens_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREEMPTIONS = "vllm:num_preemptions_total"
KV_USAGE = "vllm:kv_cache_usage_perc"

# Metrics the operator itself exports (dashboard only).
SHIFTLIGHT_DECISIONS = "shiftlight_decisions_total"
SHIFTLIGHT_ROLLOUT_WEIGHT = "shiftlight_rollout_weight"
SHIFTLIGHT_TRIALS = "shiftlight_trials_total"


def escape_label_value(value: str) -> str:
    """``value`` as the body of a double-quoted PromQL string literal (Go escaping rules)."""
    out: list[str] = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def check_label_name(name: str) -> str:
    if not _LABEL_NAME.match(name):
        raise ValueError(f"not a Prometheus label name: {name!r}")
    return name


def check_range(rng: str) -> str:
    if not _RANGE.match(rng):
        raise ValueError(f"not a PromQL range or Grafana range variable: {rng!r}")
    return rng


def duration(seconds: float) -> str:
    """A PromQL duration for ``seconds`` (whole seconds, or milliseconds when fractional)."""
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {seconds}")
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


@dataclass(frozen=True)
class Selector:
    """Which target's series to read: vLLM's ``model_name`` label plus namespace and deployment labels.

    ``model_name=None`` (and ``namespace=None``) selects every model; with ``group_by`` naming the model and namespace
    labels, every aggregation keeps them, so ONE query answers for a whole fleet (see
    :meth:`controller.observe.prometheus.PrometheusMetrics.report_many`).
    """

    model_name: str | None
    namespace: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    model_label: str = "model_name"
    namespace_label: str = "namespace"
    group_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_label_name(self.model_label)
        check_label_name(self.namespace_label)
        for name, _ in self.labels:
            check_label_name(name)
        for name in self.group_by:
            check_label_name(name)

    @classmethod
    def of(cls, model_name: str, namespace: str | None = None, labels: Mapping[str, str] | None = None) -> Selector:
        return cls(model_name=model_name, namespace=namespace, labels=tuple(sorted((labels or {}).items())))

    def matchers(self, extra: Iterable[str] = ()) -> str:
        """The ``{...}`` matcher block, with ``extra`` raw matchers (already escaped) appended."""
        parts = []
        if self.model_name is not None:
            parts.append(f'{self.model_label}="{escape_label_value(self.model_name)}"')
        if self.namespace is not None:
            parts.append(f'{self.namespace_label}="{escape_label_value(self.namespace)}"')
        parts.extend(f'{name}="{escape_label_value(value)}"' for name, value in self.labels)
        parts.extend(extra)
        return "{" + ",".join(parts) + "}"


def _sel(metric: str, selector: Selector, extra: Iterable[str] = ()) -> str:
    return metric + selector.matchers(extra)


def _by(labels: Iterable[str]) -> str:
    names = [check_label_name(n) for n in labels]
    return f" by ({', '.join(names)})" if names else ""


Kind = Literal["scalar", "by_variant", "buckets", "by_position", "series"]


@dataclass(frozen=True)
class Query:
    """One named PromQL expression.

    ``kind`` says how its result is read: ``scalar`` (one series, no labels), ``by_variant`` (one series per variant),
    ``buckets`` (one series per ``le``), ``by_position`` (one series per spec-decode draft position), ``series``
    (dashboard only: any label set).
    ``required`` fields must be present and finite or the observe cycle fails with ``MetricsUnavailable``.
    """

    name: str
    expr: str
    kind: Kind
    description: str
    required: bool = False
    unit: str = ""
    labels: tuple[str, ...] = field(default=())


def rate(metric: str, selector: Selector, rng: str, by: Iterable[str] = (), extra: Iterable[str] = ()) -> str:
    by = (*selector.group_by, *by)
    return f"sum{_by(by)} (rate({_sel(metric, selector, extra)}[{check_range(rng)}]))"


def increase(metric: str, selector: Selector, rng: str, by: Iterable[str] = (), extra: Iterable[str] = ()) -> str:
    by = (*selector.group_by, *by)
    return f"sum{_by(by)} (increase({_sel(metric, selector, extra)}[{check_range(rng)}]))"


def ratio(num: str, den: str) -> str:
    return f"({num}) / ({den})"


def histogram_mean(histogram: str, selector: Selector, rng: str, by: Iterable[str] = ()) -> str:
    by = tuple(by)
    return ratio(rate(f"{histogram}_sum", selector, rng, by), rate(f"{histogram}_count", selector, rng, by))


def histogram_quantile(q: float, histogram: str, selector: Selector, rng: str, by: Iterable[str] = ()) -> str:
    return f"histogram_quantile({q}, {rate(f'{histogram}_bucket', selector, rng, (*by, 'le'))})"


def bucket_increase(histogram: str, selector: Selector, rng: str, by: Iterable[str] = ()) -> str:
    return increase(f"{histogram}_bucket", selector, rng, (*by, "le"))


def gauge_mean(metric: str, selector: Selector, rng: str) -> str:
    """Mean of a gauge over the range, summed over replicas/engines."""
    return f"sum{_by(selector.group_by)} (avg_over_time({_sel(metric, selector)}[{check_range(rng)}]))"


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
            f"max{_by(s.group_by)} (timestamp({_sel(RUNNING, s)}))",
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
            f"avg{_by(s.group_by)} (avg_over_time({_sel(KV_USAGE, s)}[{check_range(r)}]))",
            "scalar",
            "mean KV-cache usage (0-1) across replicas",
        ),
        Query(
            "kv_usage_max",
            f"max{_by(s.group_by)} (max_over_time({_sel(KV_USAGE, s)}[{check_range(r)}]))",
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


def batch(queries: Iterable[Query]) -> str:
    """All ``queries`` as ONE PromQL expression: each result is tagged with ``shiftlight_query="<name>"``.

    ``label_replace(v, tag, name, "", "")`` adds the tag to every series of ``v``; ``or`` keeps them all because the
    tags make the label sets distinct. One HTTP round trip per observe cycle instead of one per field.
    """
    parts = [f'label_replace({q.expr}, "{QUERY_TAG}", "{escape_label_value(q.name)}", "", "")' for q in queries]
    if not parts:
        raise ValueError("batch of no queries")
    return " or ".join(parts)


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
            f"max by (variant) ({_sel(SHIFTLIGHT_ROLLOUT_WEIGHT, ops)})",
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
