"""Adapters onto the simulated fleet: metrics read the recorded ticks (and fail like Prometheus does), the router
moves the fleet's weight, the cluster deploys cold variants and records timestamped events."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from controller.adapters.simulated.fleet import SimulatedCluster, SimulatedMetrics, SimulatedRouter
from controller.clock import FakeClock
from controller.domain import STOCK, EngineConfig, Observation, TargetRef
from controller.domain.slo import SLO
from controller.errors import InvalidInput, MetricsUnavailable, NotFound
from controller.ports import Cluster, MetricsSource, TrafficRouter
from controller.simulator.fleet.service import SimulatedFleet
from controller.simulator.percentiles import mixture_quantile
from controller.simulator.traffic.diurnal import DiurnalTraffic
from tests.support.toy_perf import ToyPerf

MONDAY = datetime(2026, 11, 30, tzinfo=UTC)
T = TargetRef("llm", "workhorse", "nemotron")
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1, async_scheduling=True)


def make(profile: str = "agents-flat", *, cold_start_s: float = 180.0) -> SimulatedFleet:
    return SimulatedFleet(
        "toy", "toy", DiurnalTraffic(0, profile), FakeClock(MONDAY), 0, perf=ToyPerf(), cold_start_s=cold_start_s
    )


def test_adapters_satisfy_ports() -> None:
    fleet = make()
    assert isinstance(SimulatedMetrics(fleet), MetricsSource)
    assert isinstance(SimulatedRouter(fleet), TrafficRouter)
    assert isinstance(SimulatedCluster(fleet), Cluster)


# ----- metrics -------------------------------------------------------------------------------------------------------
def test_observe_aggregates_the_window() -> None:
    fleet = make()
    fleet.advance(900)
    obs = SimulatedMetrics(fleet).observe(T, start=MONDAY, end=MONDAY + timedelta(seconds=600))
    assert obs.target == "llm/workhorse" and obs.start == MONDAY
    true = fleet.ticks[0].shape
    assert obs.shape.arrival_rate_rps == pytest.approx(true.arrival_rate_rps)
    assert obs.shape.concurrency == pytest.approx(true.concurrency)
    assert obs.shape.prompt_tokens.mean == pytest.approx(512)
    assert obs.shape.window is not None and obs.shape.window.name == "all-day"
    assert set(obs.variants) == {"stable"}
    stable = obs.variants["stable"]
    ticks = fleet.ticks[:10]
    assert stable.requests == sum(t.variants["stable"].requests for t in ticks)
    assert stable.output_tokens_per_s == pytest.approx(stable.requests * 512 / 600)
    p95 = ticks[0].variants["stable"].ttft_s
    assert p95 is not None and stable.ttft_p95_s == pytest.approx(p95.p95)
    assert stable.error_rate == 0 and stable.good_requests is not None and stable.spec_acceptance_rate is None


@pytest.mark.parametrize("percentile", [99, 90, 99.9])
def test_observe_reads_each_variants_latency_at_the_slos_percentile(percentile: float) -> None:
    """The fleet's SLO on another percentile than 95: each variant carries its TTFT/TPOT there, from the same
    request-weighted mixture of the ticks' distributions as its p95."""
    slo = SLO(ttft_percentile=percentile, tpot_percentile=percentile)
    fleet = SimulatedFleet(
        "toy", "toy", DiurnalTraffic(0, "agents-flat"), FakeClock(MONDAY), 0, perf=ToyPerf(), slo=slo, cold_start_s=0
    )
    SimulatedCluster(fleet).deploy(T, "candidate", MTP1, 1)
    SimulatedRouter(fleet).set_weight(T, 25)
    fleet.advance(900)
    obs = SimulatedMetrics(fleet).observe(T, start=MONDAY, end=MONDAY + timedelta(seconds=600))
    for name in ("stable", "candidate"):
        stats = obs.variants[name]
        recs = [t.variants[name] for t in fleet.ticks[:10]]
        tpot = mixture_quantile(((r.served, r.tpot_s) for r in recs if r.tpot_s is not None), percentile / 100)
        ttft = mixture_quantile(((r.served, r.ttft_s) for r in recs if r.ttft_s is not None), percentile / 100)
        assert (stats.tpot_slo_percentile, stats.ttft_slo_percentile) == (percentile, percentile)
        assert stats.tpot_slo_s == pytest.approx(tpot) and stats.ttft_slo_s == pytest.approx(ttft)
        assert stats.tpot_p95_s is not None and stats.tpot_slo_s is not None
        assert (stats.tpot_slo_s > stats.tpot_p95_s) is (percentile > 95)
        assert stats.problems == ()


def test_a_p95_slo_reads_no_second_percentile() -> None:
    fleet = make()
    fleet.advance(900)
    stable = SimulatedMetrics(fleet).observe(T, start=MONDAY, end=MONDAY + timedelta(seconds=600)).variants["stable"]
    assert stable.ttft_slo_s is None and stable.ttft_slo_percentile is None
    assert stable.tpot_slo_s is None and stable.tpot_slo_percentile is None


def test_observe_splits_variants_by_weight() -> None:
    fleet = make(cold_start_s=0)
    cluster, router, metrics = SimulatedCluster(fleet), SimulatedRouter(fleet), SimulatedMetrics(fleet)
    cluster.deploy(T, "candidate", MTP1, 1)
    router.set_weight(T, 25)
    fleet.advance(3600)
    obs = metrics.observe(T, start=MONDAY, end=fleet.clock.now())
    cand, stable = obs.variants["candidate"], obs.variants["stable"]
    assert cand.requests / (cand.requests + stable.requests) == pytest.approx(0.25, abs=0.02)
    assert cand.spec_acceptance_rate == pytest.approx(0.8)
    # the faster config, on a quarter of the load, answers faster
    assert cand.tpot_p95_s is not None and stable.tpot_p95_s is not None
    assert cand.tpot_p95_s < stable.tpot_p95_s


def test_latency_fault_shows_in_that_variants_p95_only() -> None:
    fleet = make(cold_start_s=0)
    SimulatedCluster(fleet).deploy(T, "candidate", STOCK, 1)
    SimulatedRouter(fleet).set_weight(T, 50)
    metrics = SimulatedMetrics(fleet)
    fleet.advance(600)
    healthy = metrics.observe(T, start=MONDAY, end=fleet.clock.now())
    fleet.faults.latency_multiplier["candidate"] = 3.0
    start = fleet.clock.now()
    fleet.advance(600)
    slow = metrics.observe(T, start=start, end=fleet.clock.now())
    h_c, s_c = healthy.variants["candidate"], slow.variants["candidate"]
    assert h_c.ttft_p95_s is not None and s_c.ttft_p95_s is not None
    assert s_c.ttft_p95_s == pytest.approx(3 * h_c.ttft_p95_s)
    assert slow.variants["stable"].ttft_p95_s == pytest.approx(healthy.variants["stable"].ttft_p95_s)
    # a window straddling the fault mixes both distributions: its p95 lies between
    mixed = metrics.observe(T, start=MONDAY + timedelta(seconds=300), end=fleet.clock.now() - timedelta(seconds=300))
    m_c = mixed.variants["candidate"].ttft_p95_s
    assert m_c is not None and h_c.ttft_p95_s < m_c < s_c.ttft_p95_s


def test_observe_catches_up_with_the_clock() -> None:
    fleet = make()
    fleet.clock.advance(300)
    obs = SimulatedMetrics(fleet).observe(T, start=MONDAY, end=fleet.clock.now())
    assert obs.variants["stable"].requests > 0 and len(fleet.ticks) == 5


@pytest.mark.parametrize("fault", ["outage", "nan", "empty"])
def test_metrics_faults_raise_metrics_unavailable(fault: str) -> None:
    fleet = make()
    fleet.advance(600)
    metrics = SimulatedMetrics(fleet)
    fleet.faults.metrics = fault  # type: ignore[assignment]
    with pytest.raises(MetricsUnavailable) as info:
        metrics.observe(T, start=MONDAY, end=fleet.clock.now())
    assert info.value.delay_s > 0
    fleet.faults.clear()
    assert metrics.observe(T, start=MONDAY, end=fleet.clock.now()).variants["stable"].requests > 0


def test_no_data_raises() -> None:
    fleet = make()
    fleet.advance(600)
    metrics = SimulatedMetrics(fleet)
    with pytest.raises(MetricsUnavailable, match="no samples"):
        metrics.observe(T, start=MONDAY - timedelta(hours=2), end=MONDAY)
    with pytest.raises(MetricsUnavailable, match="empty window"):
        metrics.observe(T, start=MONDAY, end=MONDAY)


def test_nan_answers_are_not_trusted_even_when_only_one_value_is_bad() -> None:
    fleet = make()
    fleet.advance(120)
    fleet.faults.metrics = "nan"
    with pytest.raises(MetricsUnavailable, match="NaN"):
        SimulatedMetrics(fleet).observe(T, start=MONDAY, end=fleet.clock.now())
    assert not math.isnan(fleet.ticks[0].shape.arrival_rate_rps)  # the fleet itself is untouched


# ----- router --------------------------------------------------------------------------------------------------------
def test_router_moves_the_fleet_weight_and_validates() -> None:
    fleet = make()
    router = SimulatedRouter(fleet)
    assert router.get_weight(T) == 0
    router.set_weight(T, 30)
    assert router.get_weight(T) == fleet.candidate_weight == 30
    for bad in (-1, 101, 50.0, False):
        with pytest.raises(InvalidInput, match="candidate_weight"):
            router.set_weight(T, bad)  # type: ignore[arg-type]
    assert router.get_weight(T) == 30
    assert router.history == [(MONDAY, 30)]


# ----- cluster -------------------------------------------------------------------------------------------------------
def test_cluster_deploys_cold_variants_and_records_events() -> None:
    fleet = make(cold_start_s=180)
    cluster = SimulatedCluster(fleet)
    cluster.deploy(T, "candidate", MTP1, 2)
    assert cluster.ready_replicas(T, "candidate") == 0
    assert cluster.ready_replicas(T, "stable") == 1
    fleet.advance(120)
    cluster.record_event(T, "CandidateStarting", "mtp1 warming up")
    fleet.advance(60)
    assert cluster.ready_replicas(T, "candidate") == 2
    cluster.scale(T, "candidate", 1)
    assert fleet.variant("candidate") is not None and fleet.ready_replicas("candidate") == 1
    cluster.record_event(T, "RolledBack", "TTFT p95 above SLO", warning=True)
    cluster.retire(T, "candidate")
    assert fleet.variant("candidate") is None
    assert [(e.reason, e.at, e.warning) for e in cluster.events] == [
        ("CandidateStarting", MONDAY + timedelta(seconds=120), False),
        ("RolledBack", MONDAY + timedelta(seconds=180), True),
    ]
    assert [c.op for c in cluster.calls] == ["deploy", "event", "scale", "event", "retire"]


def test_cluster_promote_and_errors() -> None:
    fleet = make(cold_start_s=60)
    cluster, router = SimulatedCluster(fleet), SimulatedRouter(fleet)
    with pytest.raises(NotFound):
        cluster.promote(T)
    with pytest.raises(NotFound):
        cluster.scale(T, "candidate", 1)
    with pytest.raises(InvalidInput, match="variant"):
        cluster.deploy(T, "blue", STOCK, 1)
    cluster.deploy(T, "candidate", MTP1, 1)
    fleet.advance(60)
    router.set_weight(T, 100)
    cluster.promote(T)
    assert router.get_weight(T) == 0
    assert cluster.ready_replicas(T, "stable") == 1 and cluster.ready_replicas(T, "candidate") == 0
    stable = fleet.variant("stable")
    assert stable is not None and stable.config == MTP1


# ----- a day on the real performance model --------------------------------------------------------------------------
def test_observing_a_real_day_window_by_window() -> None:
    traffic = DiurnalTraffic(2)
    fleet = SimulatedFleet("nemotron-3-super-nvfp4", "gb300-dgx-station", traffic, FakeClock(MONDAY), 2)
    cluster, router, metrics = SimulatedCluster(fleet), SimulatedRouter(fleet), SimulatedMetrics(fleet)
    cluster.deploy(T, "candidate", MTP1, 1)
    fleet.advance(600)
    router.set_weight(T, 20)
    fleet.advance(86_400 - 600)
    seen: dict[str, Observation] = {}
    for window in traffic.windows:
        start = MONDAY + timedelta(hours=window.start_hour)
        obs = metrics.observe(T, start=start, end=MONDAY + timedelta(hours=window.end_hour))
        assert obs.shape.window == window
        seen[window.name] = obs
    day, night = seen["day"], seen["night"]
    assert day.shape.concurrency > 20 * night.shape.concurrency
    assert night.shape.prompt_tokens.mean > 20 * day.shape.prompt_tokens.mean
    assert night.shape.repetitiveness > 0.7 > day.shape.repetitiveness
    for obs in (day, night):
        cand, stable = obs.variants["candidate"], obs.variants["stable"]
        assert cand.spec_acceptance_rate is not None and stable.spec_acceptance_rate is None
        assert cand.requests / (cand.requests + stable.requests) == pytest.approx(0.2, abs=0.05)
        assert cand.error_rate == 0 and stable.error_rate == 0
    # the MTP candidate beats stock on per-token latency under the daytime load
    assert day.variants["candidate"].tpot_p95_s < day.variants["stable"].tpot_p95_s  # type: ignore[operator]
