"""PromQL building blocks: vLLM's metric names, safe selectors and the aggregations Shiftlight composes.

Label values are escaped as PromQL string literals, so quotes, braces, backslashes or newlines in a model name cannot
change the query's structure. Label names are checked against Prometheus' label-name grammar. Ranges are PromQL
durations (``"300s"``) or Grafana variables (``"$__rate_interval"``).

Metric names are vLLM's own (``vllm/v1/metrics/loggers.py``, ``vllm/v1/spec_decode/metrics.py``); counters carry the
``_total`` suffix that ``prometheus_client`` appends when they are scraped. The query sets built from these blocks
live in :mod:`controller.observe.queries` and :mod:`controller.observe.dashboard_queries`.
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


def series(metric: str, selector: Selector, extra: Iterable[str] = ()) -> str:
    return metric + selector.matchers(extra)


def by_clause(labels: Iterable[str]) -> str:
    names = [check_label_name(n) for n in labels]
    return f" by ({', '.join(names)})" if names else ""


def error_matcher() -> str:
    """The label matcher of requests that finished with an error or were aborted."""
    return 'finished_reason=~"' + "|".join(ERROR_FINISH_REASONS) + '"'


def quantile_name(q: float) -> str:
    """A quantile as it appears in query names: 0.95 -> ``p95``."""
    return f"p{round(q * 100)}"


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
    return f"sum{by_clause(by)} (rate({series(metric, selector, extra)}[{check_range(rng)}]))"


def increase(metric: str, selector: Selector, rng: str, by: Iterable[str] = (), extra: Iterable[str] = ()) -> str:
    by = (*selector.group_by, *by)
    return f"sum{by_clause(by)} (increase({series(metric, selector, extra)}[{check_range(rng)}]))"


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
    return f"sum{by_clause(selector.group_by)} (avg_over_time({series(metric, selector)}[{check_range(rng)}]))"


def batch(queries: Iterable[Query]) -> str:
    """All ``queries`` as ONE PromQL expression: each result is tagged with ``shiftlight_query="<name>"``.

    ``label_replace(v, tag, name, "", "")`` adds the tag to every series of ``v``; ``or`` keeps them all because the
    tags make the label sets distinct. One HTTP round trip per observe cycle instead of one per field.
    """
    parts = [f'label_replace({q.expr}, "{QUERY_TAG}", "{escape_label_value(q.name)}", "", "")' for q in queries]
    if not parts:
        raise ValueError("batch of no queries")
    return " or ".join(parts)
