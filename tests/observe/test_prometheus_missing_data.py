"""Through a real Prometheus: a candidate whose TTFT p95 lies beyond the histogram's top finite bucket (in
``le="+Inf"``; Prometheus answers the highest finite bound for it) and a candidate without traffic (NaN quantiles)
reach the rollout analysis as data problems, and the analysis is not Successful for either.

The series are backfilled (promtool) at a fixed instant, so nothing depends on the wall clock.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from controller.decide import RolloutRules
from controller.decide.rollout.analysis import Analysis, analyse
from controller.domain.observation import DataProblem, TargetRef, VariantStats
from controller.domain.slo import SLO
from controller.observe import promql
from controller.observe.prometheus import PrometheusMetrics, PrometheusSettings
from controller.observe.synthetic import TTFT_BUCKETS, SyntheticTarget, write_openmetrics_files
from tests.support.prometheus_server import PrometheusServer, backfill_openmetrics, start_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.security]

END = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
SLO_ = SLO(ttft_seconds=2.0, tpot_seconds=0.1)
TOP_FINITE_BUCKET = max(b for b in TTFT_BUCKETS if math.isfinite(b))
TARGETS = [
    SyntheticTarget("slow", variant="stable", rate=lambda ts: 4.0, ttft_s=0.3),
    # a mean TTFT far above the top finite bucket: most requests land in le="+Inf"
    SyntheticTarget("slow", variant="candidate", rate=lambda ts: 4.0, ttft_s=4 * TOP_FINITE_BUCKET),
    SyntheticTarget("idle", variant="stable", rate=lambda ts: 4.0, ttft_s=0.3),
    SyntheticTarget("idle", variant="candidate", rate=lambda ts: 0.0, ttft_s=0.3),
    # the candidate's TTFT histogram is not scraped (e.g. dropped by a relabelling rule); the rest is
    SyntheticTarget("blind", variant="stable", rate=lambda ts: 4.0),
    SyntheticTarget("blind", variant="candidate", rate=lambda ts: 4.0),
]
BLIND_CANDIDATE_TTFT = (promql.TTFT, 'model_name="blind"', 'variant="candidate"')


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    workdir = tmp_path_factory.mktemp("missing-data")
    files, _ = write_openmetrics_files(
        workdir / "openmetrics",
        TARGETS,
        start=(END - timedelta(hours=2)).timestamp(),
        end=END.timestamp(),
        step_s=30.0,
    )
    for path in files:
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if not all(part in line for part in BLIND_CANDIDATE_TTFT)))
    backfill_openmetrics(files, workdir)
    shutil.rmtree(workdir / "openmetrics")
    server = start_prometheus([], workdir)
    try:
        yield server
    finally:
        server.stop()


def read(prometheus: PrometheusServer, model: str) -> tuple[VariantStats | None, Analysis, dict[str, float]]:
    """The candidate's stats as the adapter reads them, the analysis of a baked step at 25 %, and Prometheus' own
    answer for the p95 TTFT per variant."""
    source = PrometheusMetrics(PrometheusSettings(url=prometheus.url, max_staleness_s=600), slo=SLO_)
    target = TargetRef("prod", model, model)
    obs = source.observe(target, start=END - timedelta(minutes=30), end=END)
    raw = source.query(
        promql.histogram_quantile(0.95, promql.TTFT, source.settings.selector(target), "30m", ("variant",)),
        END,
        what="p95",
    )
    candidate = obs.variants.get("candidate")
    analysis = analyse(
        candidate=candidate,
        stable=obs.variants.get("stable"),
        slo=SLO_,
        rules=RolloutRules(),
        step_age_s=3600,
        weight=25,
    )
    return candidate, analysis, {labels["variant"]: value for labels, value in raw}


def test_a_candidate_beyond_the_top_bucket_fails_the_analysis(prometheus: PrometheusServer) -> None:
    candidate, analysis, p95 = read(prometheus, "slow")
    # histogram_quantile answers the highest finite bound for a quantile in le="+Inf": a lower bound that reads
    # like a measured latency; the adapter sees from the buckets that it lies beyond
    assert p95["candidate"] == TOP_FINITE_BUCKET
    assert math.isfinite(p95["stable"])
    assert candidate is not None and candidate.requests > 1000
    assert candidate.ttft_p95_s is None
    assert candidate.problem("ttft_p95") == DataProblem(signal="ttft_p95", kind="beyond-top-bucket")
    assert analysis.verdict != "Successful"
    assert (analysis.verdict, analysis.code) == ("Failed", "beyond-top-bucket"), analysis.reason


def test_a_candidate_without_traffic_has_nan_quantiles_and_is_not_judged(prometheus: PrometheusServer) -> None:
    candidate, analysis, p95 = read(prometheus, "idle")
    assert math.isnan(p95["candidate"])  # rate over zero observations: 0/0
    assert candidate is not None and candidate.requests == 0
    assert candidate.problem("ttft_p95") == DataProblem(signal="ttft_p95", kind="nan")
    assert (analysis.verdict, analysis.code) == ("Inconclusive", "no-candidate-samples"), analysis.reason


def test_a_candidate_without_a_ttft_histogram_is_not_judged(prometheus: PrometheusServer) -> None:
    """Before, an absent p95 read as "no breach": this candidate passed as within the SLO."""
    candidate, analysis, p95 = read(prometheus, "blind")
    assert "candidate" not in p95 and "stable" in p95  # no candidate series for the quantile at all
    assert candidate is not None and candidate.requests > 1000
    assert candidate.problem("ttft_p95") == DataProblem(signal="ttft_p95", kind="missing")
    assert (analysis.verdict, analysis.code) == ("Inconclusive", "missing-data"), analysis.reason


def test_a_p99_slo_reads_each_variants_p99_and_its_top_bucket(prometheus: PrometheusServer) -> None:
    """With the SLO on p99 the adapter fills each variant's p99 from Prometheus' per-variant answer, and a p99 in
    ``le="+Inf"`` (answered as the highest finite bound) is recorded as beyond the top bucket."""
    # stable's p99 TTFT is about 2.1 s: a 3 s bound keeps stable inside it
    slo = SLO_.model_copy(update={"ttft_seconds": 3.0, "ttft_percentile": 99, "tpot_percentile": 99})
    source = PrometheusMetrics(PrometheusSettings(url=prometheus.url, max_staleness_s=600), slo=slo)
    target = TargetRef("prod", "slow", "slow")
    obs = source.observe(target, start=END - timedelta(minutes=30), end=END)
    selector = source.settings.selector(target)
    raw = {
        metric: {
            labels["variant"]: value
            for labels, value in source.query(
                promql.histogram_quantile(0.99, metric, selector, "30m", ("variant",)), END, what="p99"
            )
        }
        for metric in (promql.TTFT, promql.TPOT)
    }
    stable, candidate = obs.variants["stable"], obs.variants["candidate"]
    assert stable.ttft_slo_percentile == 99 and stable.tpot_slo_percentile == 99
    assert stable.ttft_slo_s == pytest.approx(raw[promql.TTFT]["stable"])
    assert stable.tpot_slo_s == pytest.approx(raw[promql.TPOT]["stable"])
    assert candidate.tpot_slo_s == pytest.approx(raw[promql.TPOT]["candidate"])
    assert raw[promql.TTFT]["candidate"] == TOP_FINITE_BUCKET
    assert candidate.ttft_slo_s is None
    assert candidate.problem("ttft_slo") == DataProblem(signal="ttft_slo", kind="beyond-top-bucket")
    analysis = analyse(candidate=candidate, stable=stable, slo=slo, rules=RolloutRules(slo_headroom=0.9), weight=25)
    assert (analysis.verdict, analysis.code) == ("Failed", "beyond-top-bucket"), analysis.reason
