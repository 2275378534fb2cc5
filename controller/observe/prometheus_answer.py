"""Reading one batched Prometheus answer: the tagged samples become a :class:`TrafficReport`, or
:class:`~controller.errors.MetricsUnavailable` whose message names the field.

Per-variant SLO signals are the exception: a variant's p95 (and its latency at the SLO's own percentiles, where
those are not 95), error count, token rate or good-request count that is absent, NaN or infinite is recorded in
:attr:`~controller.domain.observation.VariantStats.problems`, never replaced by a number, so the rollout analysis can
hold or fail instead of reading it as "within the SLO". A percentile in the histogram's ``le="+Inf"`` bucket (which
``histogram_quantile`` answers as the highest finite bound) is recorded as ``beyond-top-bucket``.

A latency at the SLO's percentile is Prometheus' answer where the adapter queries that percentile (p50, p95, p99),
and otherwise the same ``histogram_quantile`` computed from the variant's bucket counts of the same answer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime

from pydantic import ValidationError

from controller.domain.observation import (
    P95,
    DataProblem,
    DataProblemKind,
    LatencyMetric,
    TargetRef,
    VariantSignal,
    VariantStats,
)
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.errors import MetricsUnavailable
from controller.observe import promql
from controller.observe.histograms import Buckets, lognormal_cv
from controller.observe.prometheus_settings import PrometheusSettings
from controller.observe.report import LengthStats, Quantiles, ServingSignals, TrafficReport, VariantReport

Sample = tuple[dict[str, str], float]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _checked(
    signal: VariantSignal, value: float | None, problems: list[DataProblem], *, percentile: bool = False
) -> float | None:
    """``value`` when finite; otherwise None, with what was wrong appended to ``problems``.

    A percentile of +Inf means it lies above the highest finite bucket bound (see :func:`_beyond_top_bucket`):
    ``beyond-top-bucket``, larger than any bound, not a broken answer."""
    if value is not None and math.isfinite(value):
        return value
    if value is None:
        kind: DataProblemKind = "missing"
    elif math.isnan(value):
        kind = "nan"
    elif percentile and value > 0:
        kind = "beyond-top-bucket"
    else:
        kind = "inf"
    problems.append(DataProblem(signal=signal, kind=kind))
    return None


def _beyond_top_bucket(buckets: Buckets | None, q: float) -> bool:
    """Whether the ``q`` quantile lies above the histogram's highest finite bucket bound, i.e. in ``le="+Inf"``.

    Prometheus' ``histogram_quantile`` then answers the highest finite bound itself (not +Inf), which read alone
    looks like a measured latency; it is only a lower bound. The rank ``q * total`` lies in the +Inf bucket exactly
    when that bucket holds more than ``(1 - q) * total`` observations."""
    if buckets is None or buckets.total <= 0 or len(buckets.bounds) < 2 or not math.isinf(buckets.bounds[-1]):
        return False
    return buckets.counts[-1] > (1 - q) * buckets.total


def good_share(ttft: Buckets | None, tpot: Buckets | None, slo: SLO) -> float | None:
    """Upper bound on the share of requests meeting both bounds: min of the two histograms' shares at or below their
    bound (conservative inside a bucket). None without observations."""
    if ttft is None or tpot is None or ttft.total <= 0 or tpot.total <= 0:
        return None
    return min(ttft.count_at_most(slo.ttft_seconds) / ttft.total, tpot.count_at_most(slo.tpot_seconds) / tpot.total)


def tagged(samples: list[Sample]) -> dict[str, list[Sample]]:
    """Group a batched answer by the ``shiftlight_query`` tag, removing the tag."""
    by_name: dict[str, list[Sample]] = defaultdict(list)
    for labels, value in samples:
        rest = dict(labels)
        name = rest.pop(promql.QUERY_TAG, "")
        by_name[name].append((rest, value))
    return by_name


class AnswerReader:
    """Turns the tagged samples of one batched answer into a TrafficReport, or raises MetricsUnavailable."""

    def __init__(
        self,
        settings: PrometheusSettings,
        slo: SLO | None,
        target: TargetRef,
        start: datetime,
        end: datetime,
        named: tuple[promql.Query, ...],
        by_name: Mapping[str, list[Sample]],
        queries: int,
    ) -> None:
        self.settings = settings
        self.slo = slo
        self.target = target
        self.start = start
        self.end = end
        self.named = {n.name: n for n in named}
        self.by_name = by_name
        self.queries = queries
        self.warnings: list[str] = []

    def fail(self, name: str, why: str) -> MetricsUnavailable:
        expr = self.named[name].expr if name in self.named else ""
        return MetricsUnavailable(f"{self.target}: {name}: {why} (query: {expr[:300]})")

    def scalar(self, name: str, *, required: bool = False) -> float | None:
        rows = self.by_name.get(name, [])
        if not rows:
            if required:
                raise self.fail(name, "no series (empty answer or metric missing for this selector)")
            return None
        if len(rows) > 1:
            raise self.fail(name, f"expected one series, got {len(rows)} (unexpected label set)")
        labels, value = rows[0]
        if labels:
            raise self.fail(name, f"unexpected labels {labels}")
        if not math.isfinite(value):
            if required:
                raise self.fail(name, f"value is {value}")
            return None
        return value

    def required(self, name: str) -> float:
        value = self.scalar(name, required=True)
        assert value is not None
        return value

    def buckets(self, name: str, *, per_variant: bool = False, required: bool = False) -> dict[str, Buckets]:
        """Histogram buckets by variant (``per_variant``) or target-wide (key ``""``)."""
        rows = self.by_name.get(name, [])
        if not rows and required:
            raise self.fail(name, "no histogram buckets")
        grouped: dict[str, dict[float, float]] = defaultdict(dict)
        for labels, value in rows:
            key = self.variant_of(name, labels) if per_variant else ""
            try:
                grouped[key][float(labels["le"])] = value
            except (KeyError, ValueError) as exc:
                raise self.fail(name, f"bucket without a numeric le label: {labels}") from exc
        out: dict[str, Buckets] = {}
        for key, cumulative in grouped.items():
            try:
                out[key] = Buckets.from_cumulative(cumulative)
            except ValueError as exc:
                raise self.fail(name, str(exc)) from exc
        return out

    def variant_of(self, name: str, labels: Mapping[str, str]) -> str:
        variant = labels.get(self.settings.variant_label, "")
        if variant:
            return variant
        if self.settings.default_variant:
            return self.settings.default_variant
        raise self.fail(name, f"series without label {self.settings.variant_label!r}: label set is {dict(labels)}")

    def by_variant(self, name: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, value in self.by_name.get(name, []):
            variant = self.variant_of(name, labels)
            previous = out.get(variant)
            out[variant] = value if previous is None else previous + value
        return out

    def length(self, mean_name: str, buckets_name: str) -> LengthStats:
        mean = self.required(mean_name)
        if mean <= 0:
            raise self.fail(mean_name, f"mean is {mean}")
        b = self.buckets(buckets_name, required=True)[""]
        if b.total <= 0:
            raise self.fail(buckets_name, "histogram holds no requests")
        return LengthStats(
            mean=mean,
            cv=min(lognormal_cv(b, mean), 10.0),
            p50=b.quantile(0.5),
            p90=b.quantile(0.9),
            p99=b.quantile(0.99),
        )

    def quantiles(self, prefix: str) -> Quantiles:
        return Quantiles(
            p50=self.scalar(f"{prefix}_p50"), p95=self.scalar(f"{prefix}_p95"), p99=self.scalar(f"{prefix}_p99")
        )

    def report(self) -> TrafficReport:
        freshest = self.required("freshest_sample")
        age = self.end.timestamp() - freshest
        if age > self.settings.max_staleness_s:
            raise self.fail("freshest_sample", f"newest sample is {age:.0f}s old (> {self.settings.max_staleness_s}s)")
        requests_ = self.required("requests")
        if requests_ < self.settings.min_requests:
            raise self.fail("requests", f"{requests_:.1f} requests finished in the window: shape undefined")
        arrival = max(self.required("arrival_rate"), 0.0)
        littles = max(self.required("concurrency_littles_law"), 0.0)
        running = max(self.required("running_mean"), 0.0)
        waiting = max(self.required("waiting_mean"), 0.0)
        gauges = running + waiting
        if max(littles, gauges) >= 1.0 and abs(littles - gauges) > 0.5 * max(littles, gauges):
            self.warnings.append(
                f"concurrency: Little's law gives {littles:.2f}, running+waiting gauges {gauges:.2f}"
                " (gauges are sampled once per scrape)"
            )
        prompt = self.length("prompt_mean", "prompt_buckets")
        output = self.length("output_mean", "output_buckets")

        drafts = self.scalar("spec_drafts")
        spec_on = drafts is not None and drafts > 0
        per_position: list[tuple[int, float]] = []
        if spec_on:
            for labels, value in self.by_name.get("spec_acceptance_per_position", []):
                if math.isfinite(value) and labels.get("position", "").isdigit():
                    per_position.append((int(labels["position"]), min(max(value, 0.0), 1.0)))
        hit_rate = self.scalar("prefix_cache_hit_rate")
        acceptance = self.scalar("spec_acceptance_rate") if spec_on else None
        repetitiveness = 0.0
        if self.settings.repetitiveness_from_spec and spec_on:
            repetitiveness = min(max(self.scalar("spec_accepted_share") or 0.0, 0.0), 1.0)
        signals = ServingSignals(
            requests=requests_,
            ttft_s=self.quantiles("ttft"),
            tpot_s=self.quantiles("tpot"),
            output_tokens_per_s=self.scalar("output_tokens_per_s"),
            spec_drafts=drafts,
            spec_acceptance_rate=None if acceptance is None else min(max(acceptance, 0.0), 1.0),
            spec_mean_acceptance_length=self.scalar("spec_mean_acceptance_length") if spec_on else None,
            spec_acceptance_per_position=tuple(v for _, v in sorted(per_position)),
            prefix_cache_hit_rate=None if hit_rate is None else min(max(hit_rate, 0.0), 1.0),
            preemptions=self.scalar("preemptions"),
            kv_usage_mean=self.scalar("kv_usage_mean"),
            kv_usage_max=self.scalar("kv_usage_max"),
            concurrency_littles_law=littles,
            running_mean=running,
            waiting_mean=waiting,
        )
        try:
            shape = TrafficShape(
                arrival_rate_rps=arrival,
                concurrency=littles,
                prompt_tokens=LengthDistribution(mean=prompt.mean, cv=prompt.cv),
                output_tokens=LengthDistribution(mean=output.mean, cv=output.cv),
                repetitiveness=repetitiveness,
                prefix_share=signals.prefix_cache_hit_rate or 0.0,
            )
        except ValidationError as exc:
            raise MetricsUnavailable(f"{self.target}: shape out of range: {exc.errors()[0]['msg']}") from exc
        return TrafficReport(
            target=str(self.target),
            start=self.start,
            end=self.end,
            shape=shape,
            prompt_tokens=prompt,
            output_tokens=output,
            signals=signals,
            variants=self.variants(),
            warnings=tuple(self.warnings),
            queries=self.queries,
        )

    @staticmethod
    def p95(
        quantiles: Mapping[str, Mapping[str, float]], metric: str, buckets: Mapping[str, Buckets], variant: str
    ) -> float | None:
        """The variant's p95 as answered, or +Inf when it lies beyond the histogram's top finite bucket."""
        return AnswerReader.at_percentile(quantiles, metric, buckets, variant, P95)

    @staticmethod
    def at_percentile(
        quantiles: Mapping[str, Mapping[str, float]],
        metric: str,
        buckets: Mapping[str, Buckets],
        variant: str,
        percentile: float,
    ) -> float | None:
        """The variant's latency at ``percentile``: +Inf when it lies beyond the histogram's top finite bucket, else
        Prometheus' answer for a queried percentile, else ``histogram_quantile`` of the variant's buckets (NaN over
        empty buckets, None without them)."""
        quantile = percentile / 100
        variant_buckets = buckets.get(variant)
        if _beyond_top_bucket(variant_buckets, quantile):
            return math.inf
        queried = quantiles.get(f"{metric}_p{percentile:g}")
        if queried is not None:
            return queried.get(variant)
        return None if variant_buckets is None else variant_buckets.quantile(quantile)

    def at_slo(
        self,
        quantiles: Mapping[str, Mapping[str, float]],
        buckets: Mapping[LatencyMetric, Mapping[str, Buckets]],
        variant: str,
        problems: list[DataProblem],
    ) -> dict[str, float | None]:
        """VariantStats fields for the latency at each SLO percentile that is not 95 (checked into ``problems``)."""
        out: dict[str, float | None] = {}
        if self.slo is None:
            return out
        signals: tuple[tuple[LatencyMetric, VariantSignal, float], ...] = (
            ("ttft", "ttft_slo", self.slo.ttft_percentile),
            ("tpot", "tpot_slo", self.slo.tpot_percentile),
        )
        for metric, signal, percentile in signals:
            if percentile == P95:
                continue
            value = self.at_percentile(quantiles, metric, buckets[metric], variant, percentile)
            out[f"{metric}_slo_percentile"] = percentile
            out[f"{metric}_slo_s"] = _checked(signal, value, problems, percentile=True)
        return out

    def variants(self) -> dict[str, VariantReport]:
        requests_ = self.by_variant("v_requests")
        if not requests_:
            raise self.fail("v_requests", "no series")
        errors = self.by_variant("v_errors")
        tokens = self.by_variant("v_output_tokens_per_s")
        acceptance = self.by_variant("v_spec_acceptance_rate")
        quantiles = {f"{m}_{p}": self.by_variant(f"v_{m}_{p}") for m in ("ttft", "tpot") for p in ("p50", "p95", "p99")}
        ttft_b = self.buckets("v_ttft_buckets", per_variant=True)
        tpot_b = self.buckets("v_tpot_buckets", per_variant=True)
        out: dict[str, VariantReport] = {}
        for variant, count in sorted(requests_.items()):
            if not math.isfinite(count):
                raise self.fail("v_requests", f"variant {variant}: value is {count}")

            def qs(metric: str, variant: str = variant) -> Quantiles:
                return Quantiles(**{p: _finite(quantiles[f"{metric}_{p}"].get(variant)) for p in ("p50", "p95", "p99")})

            total = max(round(count), 0)
            problems: list[DataProblem] = []
            good: int | None = None
            slo = self.slo
            if slo is not None:
                # shares within each histogram, applied to the finished count: the histograms are observed at
                # first token / at finish, so their totals differ from request_success by in-flight requests
                share = good_share(ttft_b.get(variant), tpot_b.get(variant), slo)
                if share is not None and math.isfinite(share):
                    good = round(total * share)
                else:
                    _checked("good_requests", share, problems)
            acc = _finite(acceptance.get(variant))
            ttft, tpot = qs("ttft"), qs("tpot")
            # what the analysis reads is checked, never defaulted: a NaN/absent number is recorded as a problem
            ttft_p95 = _checked("ttft_p95", self.p95(quantiles, "ttft", ttft_b, variant), problems, percentile=True)
            tpot_p95 = _checked("tpot_p95", self.p95(quantiles, "tpot", tpot_b, variant), problems, percentile=True)
            at_slo = self.at_slo(quantiles, {"ttft": ttft_b, "tpot": tpot_b}, variant, problems)
            error_count = _checked("errors", errors.get(variant), problems)
            tokens_per_s = _checked("output_tokens_per_s", tokens.get(variant), problems)
            stats = VariantStats(
                variant=variant,
                requests=total,
                errors=min(max(round(error_count or 0.0), 0), total),
                ttft_p95_s=ttft_p95,
                tpot_p95_s=tpot_p95,
                **at_slo,
                output_tokens_per_s=max(tokens_per_s or 0.0, 0.0),
                good_requests=None if good is None else min(max(good, 0), total),
                spec_acceptance_rate=None if acc is None else min(max(acc, 0.0), 1.0),
                problems=tuple(problems),
            )
            out[variant] = VariantReport(stats=stats, ttft_s=ttft, tpot_s=tpot)
        return out


__all__ = ["AnswerReader", "Sample", "good_share", "tagged"]
