"""A canned batched Prometheus answer read into per-variant stats: the latency at the SLO's own percentile. A p99 SLO
is filled from Prometheus' per-variant p99 answer; any other percentile from the same ``histogram_quantile`` over the
variant's buckets; a percentile beyond the top bucket, NaN or absent is a recorded data problem, never a number. At
p95 the SLO's value is the p95 already read (no second field). No server: the samples are what the batched query
answers, tagged by query name."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from controller.decide import RolloutRules
from controller.decide.rollout.analysis import analyse
from controller.domain.observation import DataProblem, DataProblemKind, TargetRef, VariantStats
from controller.domain.slo import SLO
from controller.observe import promql
from controller.observe import queries as q
from controller.observe.histograms import Buckets
from controller.observe.prometheus_answer import AnswerReader, Sample, tagged
from controller.observe.prometheus_settings import PrometheusSettings

END = datetime(2026, 12, 1, 19, 0, tzinfo=UTC)
TARGET = TargetRef("prod", "quoting", "qwen")
BOUNDS = (0.005, 0.01, 0.02, 0.04, 0.08, math.inf)
#: cumulative TPOT bucket counts per variant: 1000 requests; the candidate's tail reaches past 40 ms
TPOT_BUCKETS = {
    "stable": (200, 700, 990, 1000, 1000, 1000),
    "candidate": (100, 500, 900, 980, 1000, 1000),
    "beyond": (100, 500, 900, 950, 980, 1000),  # 2 % above the top finite bound: its p99 is beyond it
}
TTFT_BOUNDS = (0.5, 1.0, 2.0, 5.0, 10.0, math.inf)
TTFT_BUCKETS = (300, 800, 950, 995, 1000, 1000)


def answer(variants: dict[str, dict[str, float]]) -> list[Sample]:
    """The tagged samples of one batched answer: ``{variant: {query name: value}}`` plus the histograms."""
    out: list[Sample] = []
    for variant, values in variants.items():
        for name, value in values.items():
            out.append(({promql.QUERY_TAG: name, "variant": variant}, value))
        for le, count in zip(BOUNDS, TPOT_BUCKETS[variant], strict=True):
            out.append(({promql.QUERY_TAG: "v_tpot_buckets", "variant": variant, "le": str(le)}, float(count)))
        for le, count in zip(TTFT_BOUNDS, TTFT_BUCKETS, strict=True):
            out.append(({promql.QUERY_TAG: "v_ttft_buckets", "variant": variant, "le": str(le)}, float(count)))
    return out


def canned(**p99: float) -> list[Sample]:
    """Prometheus' per-variant answers, with the given TPOT p99 per variant."""
    return answer(
        {
            variant: {
                "v_requests": 1000.0,
                "v_errors": 0.0,
                "v_output_tokens_per_s": 300.0,
                "v_ttft_p50": 0.8,
                "v_ttft_p95": 2.0,
                "v_ttft_p99": 4.6,
                "v_tpot_p50": 0.010,
                "v_tpot_p95": 0.018,
                "v_tpot_p99": value,
            }
            for variant, value in p99.items()
        }
    )


def read(samples: list[Sample], slo: SLO) -> dict[str, VariantStats]:
    settings = PrometheusSettings(url="http://127.0.0.1:9")
    named = q.observe_queries(settings.selector(TARGET), "5m", settings.variant_label)
    reader = AnswerReader(settings, slo, TARGET, END - timedelta(minutes=5), END, named, tagged(samples), 1)
    return {name: report.stats for name, report in reader.variants().items()}


P99 = SLO(ttft_seconds=10.0, ttft_percentile=99, tpot_seconds=0.04, tpot_percentile=99)


def test_a_p99_slo_is_filled_from_prometheus_per_variant_p99() -> None:
    stats = read(canned(stable=0.0195, candidate=0.041), P99)
    assert (stats["stable"].tpot_slo_s, stats["stable"].tpot_slo_percentile) == (0.0195, 99)
    assert (stats["candidate"].tpot_slo_s, stats["candidate"].tpot_slo_percentile) == (0.041, 99)
    assert stats["candidate"].ttft_slo_s == 4.6 and stats["candidate"].ttft_slo_percentile == 99
    assert stats["candidate"].tpot_p95_s == 0.018  # the p95 stays what it was
    assert stats["candidate"].problems == ()
    analysis = analyse(candidate=stats["candidate"], stable=stats["stable"], slo=P99, rules=RolloutRules(), weight=10)
    assert (analysis.verdict, analysis.code) == ("Failed", "slo-breach"), analysis.reason


@pytest.mark.parametrize("percentile", [50, 90, 97.5, 99.9])
def test_any_other_percentile_is_histogram_quantile_of_the_variants_buckets(percentile: float) -> None:
    slo = P99.model_copy(update={"tpot_percentile": percentile})
    stats = read(canned(stable=0.0195, candidate=0.041), slo)
    buckets = Buckets.from_cumulative(dict(zip(BOUNDS, map(float, TPOT_BUCKETS["candidate"]), strict=True)))
    expected = {50: 0.010} if percentile == 50 else {}  # p50 is one of the queried quantiles
    assert stats["candidate"].tpot_slo_percentile == percentile
    assert stats["candidate"].tpot_slo_s == pytest.approx(expected.get(percentile, buckets.quantile(percentile / 100)))


def test_a_p95_slo_adds_no_second_field() -> None:
    stats = read(canned(stable=0.0195, candidate=0.041), SLO(tpot_seconds=0.04))
    assert stats["candidate"].tpot_slo_s is None and stats["candidate"].tpot_slo_percentile is None
    assert stats["candidate"].ttft_slo_percentile is None


@pytest.mark.security
def test_a_p99_beyond_the_top_bucket_is_recorded_not_read_as_the_top_bound() -> None:
    # Prometheus answers the highest finite bound (80 ms) for a quantile in le="+Inf"
    stats = read(canned(stable=0.0195, beyond=0.08), P99)
    beyond = stats["beyond"]
    assert beyond.tpot_slo_s is None
    assert beyond.problem("tpot_slo") == DataProblem(signal="tpot_slo", kind="beyond-top-bucket")
    assert beyond.problem("tpot_p95") is None  # its p95 is inside the histogram
    analysis = analyse(candidate=beyond, stable=stats["stable"], slo=P99, rules=RolloutRules())
    assert (analysis.verdict, analysis.code) == ("Failed", "beyond-top-bucket"), analysis.reason


@pytest.mark.security
@pytest.mark.parametrize(
    ("value", "kind", "code"), [(math.nan, "nan", "non-finite"), (None, "missing", "missing-data")]
)
def test_a_nan_or_absent_p99_is_a_data_problem(value: float | None, kind: DataProblemKind, code: str) -> None:
    samples = canned(stable=0.0195, candidate=0.0 if value is None else value)
    if value is None:  # no v_tpot_p99 series for the candidate
        samples = [
            (labels, v)
            for labels, v in samples
            if not (labels[promql.QUERY_TAG] == "v_tpot_p99" and labels["variant"] == "candidate")
        ]
    candidate = read(samples, P99)["candidate"]
    assert candidate.tpot_slo_s is None
    assert candidate.problem("tpot_slo") == DataProblem(signal="tpot_slo", kind=kind)
    stable = read(samples, P99)["stable"]
    analysis = analyse(
        candidate=candidate, stable=stable, slo=P99, rules=RolloutRules(slo_headroom=0.9), step_age_s=3600
    )
    assert (analysis.verdict, analysis.code) == ("Inconclusive", code), analysis.reason
