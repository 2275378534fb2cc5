"""The simulated production fleet: routing by weight, cold starts, faults, GPU accounting, determinism.

The mechanics are tested against a small closed-form performance model (``ToyPerf``) whose numbers are easy to
reason about; ``test_fleet_perf.py``-style behaviour that depends on the real model is at the bottom.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controller.clock import FakeClock
from controller.domain import SLO, STOCK, EngineConfig, Percentiles
from controller.errors import InvalidInput, NotFound
from controller.simulator.fleet.records import totals
from controller.simulator.fleet.service import SimulatedFleet
from controller.simulator.percentiles import fraction_within, mixture_quantile
from controller.simulator.traffic.diurnal import DiurnalTraffic
from tests.support.toy_perf import ToyPerf

MONDAY = datetime(2026, 11, 30, tzinfo=UTC)
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1, async_scheduling=True)
BROKEN = EngineConfig(max_num_seqs=1)  # ToyPerf refuses it


def make_fleet(
    profile: str = "agents-flat", *, seed: int = 0, replicas: int = 1, cold_start_s: float = 180.0
) -> SimulatedFleet:
    return SimulatedFleet(
        "toy",
        "toy",
        DiurnalTraffic(seed, profile),
        FakeClock(MONDAY),
        seed,
        stable_replicas=replicas,
        cold_start_s=cold_start_s,
        perf=ToyPerf(),
        slo=SLO(ttft_seconds=2.0, tpot_seconds=0.1),
    )


# ----- determinism and time --------------------------------------------------------------------------------------
def test_same_seed_same_ticks_other_seed_other_draws() -> None:
    a, b, c = make_fleet(seed=1), make_fleet(seed=1), make_fleet(seed=2)
    for fleet in (a, b, c):
        fleet.advance(1800)
    assert a.ticks == b.ticks
    assert [t.variants["stable"].requests for t in a.ticks] != [t.variants["stable"].requests for t in c.ticks]


def test_advance_moves_the_clock_in_ticks() -> None:
    fleet = make_fleet()
    assert fleet.advance(150) == MONDAY + timedelta(seconds=150)
    assert [t.seconds for t in fleet.ticks] == [60, 60, 30]
    assert fleet.ticks[-1].end == fleet.clock.now()


def test_catch_up_when_someone_else_moves_the_clock() -> None:
    fleet = make_fleet()
    fleet.clock.advance(300)
    fleet.catch_up()
    assert len(fleet.ticks) == 5 and fleet.ticks[-1].end == MONDAY + timedelta(seconds=300)
    fleet.advance(60)
    assert len(fleet.ticks) == 6


def test_requests_follow_the_arrival_rate() -> None:
    fleet = make_fleet()
    fleet.advance(3600)
    t = totals(fleet.ticks)
    expected = fleet.ticks[0].shape.arrival_rate_rps * 3600
    assert t["requests"] == pytest.approx(expected, rel=0.03)
    assert t["errors"] == 0
    assert 0.9 * t["requests"] < t["good_requests"] <= t["requests"]
    assert t["output_tokens"] == pytest.approx(t["requests"] * 512, rel=1e-9)


# ----- routing -------------------------------------------------------------------------------------------------------
def test_weights_split_requests() -> None:
    fleet = make_fleet(cold_start_s=0)
    fleet.deploy("candidate", STOCK, 1)
    fleet.set_weight(25)
    fleet.advance(3600)
    cand, stable = totals(fleet.ticks, "candidate"), totals(fleet.ticks, "stable")
    share = cand["requests"] / (cand["requests"] + stable["requests"])
    assert share == pytest.approx(0.25, abs=0.02)
    assert all(t.candidate_weight == 25 and t.variants["candidate"].weight == 25 for t in fleet.ticks)


def test_rate_splits_across_ready_replicas() -> None:
    one, two = make_fleet(replicas=1), make_fleet(replicas=2)
    one.advance(600)
    two.advance(600)
    per_one, per_two = one.ticks[-1].variants["stable"], two.ticks[-1].variants["stable"]
    # two replicas each see half the concurrency, so latency drops
    assert per_two.tpot_s is not None and per_one.tpot_s is not None
    assert per_two.tpot_s.p95 < per_one.tpot_s.p95
    assert per_two.capacity_tokens_per_s > per_one.capacity_tokens_per_s


def test_traffic_to_a_missing_variant_fails() -> None:
    fleet = make_fleet()
    fleet.set_weight(40)  # no candidate deployed
    fleet.advance(600)
    cand = totals(fleet.ticks, "candidate")
    assert cand["requests"] > 0 and cand["errors"] == cand["requests"] and cand["gpu_seconds"] == 0
    assert fleet.ticks[-1].variants["candidate"].note == "not deployed"


# ----- cold start, scaling, promotion ------------------------------------------------------------------------------
def test_new_variant_serves_nothing_during_cold_start() -> None:
    fleet = make_fleet()
    fleet.advance(60)
    fleet.deploy("candidate", MTP1, 1)
    fleet.set_weight(50)
    assert fleet.ready_replicas("candidate") == 0
    fleet.advance(180)
    cold = [t.variants["candidate"] for t in fleet.ticks[1:4]]
    assert all(v.ready_replicas == 0 and v.errors == v.requests > 0 and v.note == "cold start" for v in cold)
    assert fleet.ready_replicas("candidate") == 1
    fleet.advance(60)
    warm = fleet.ticks[-1].variants["candidate"]
    assert warm.ready_replicas == 1 and warm.errors == 0 and warm.output_tokens > 0


def test_reconfiguring_a_variant_restarts_it_cold_but_rescaling_does_not() -> None:
    fleet = make_fleet(replicas=2)
    fleet.scale("stable", 3)
    assert fleet.ready_replicas("stable") == 2  # the new one is starting
    fleet.advance(60)
    assert fleet.ticks[-1].variants["stable"].errors == 0
    fleet.scale("stable", 2)  # the cold one goes first
    assert fleet.ready_replicas("stable") == 2
    fleet.deploy("stable", STOCK, 2)  # same config: nothing restarts
    assert fleet.ready_replicas("stable") == 2
    fleet.deploy("stable", MTP1, 2)  # new config: every replica restarts
    assert fleet.ready_replicas("stable") == 0
    fleet.advance(60)
    assert fleet.ticks[-1].variants["stable"].note == "cold start"


def test_promote_keeps_the_candidate_warm() -> None:
    fleet = make_fleet(cold_start_s=60)
    fleet.deploy("candidate", MTP1, 2)
    fleet.advance(60)
    fleet.set_weight(50)
    fleet.promote()
    assert fleet.candidate_weight == 0 and fleet.variant("candidate") is None
    stable = fleet.variant("stable")
    assert stable is not None and stable.config == MTP1 and fleet.ready_replicas("stable") == 2
    fleet.advance(60)
    last = fleet.ticks[-1]
    assert set(last.variants) == {"stable"} and last.variants["stable"].errors == 0
    with pytest.raises(NotFound):
        fleet.promote()


def test_infeasible_config_fails_every_request_but_holds_its_gpus() -> None:
    fleet = make_fleet(cold_start_s=0)
    fleet.deploy("candidate", BROKEN, 1)
    fleet.set_weight(10)
    fleet.advance(600)
    cand = totals(fleet.ticks, "candidate")
    assert cand["errors"] == cand["requests"] > 0
    assert cand["gpu_seconds"] == 600
    assert fleet.ticks[-1].variants["candidate"].note.startswith("infeasible")


def test_saturation_turns_excess_requests_into_errors() -> None:
    fleet = make_fleet()
    fleet.faults.traffic_spike = 3.0  # the toy stock replica tops out near 1.3x the flat profile's rate
    fleet.advance(600)
    t = totals(fleet.ticks)
    assert 0.3 < t["errors"] / t["requests"] < 0.8
    assert "saturated" in fleet.ticks[-1].variants["stable"].note


def test_gpu_seconds_count_replicas_times_tensor_parallel_times_time() -> None:
    fleet = make_fleet(replicas=2)
    fleet.advance(600)
    fleet.deploy("candidate", EngineConfig(tensor_parallel_size=2), 1)
    fleet.advance(600)
    assert fleet.gpu_seconds("stable") == 2 * 1200
    assert fleet.gpu_seconds("candidate") == 2 * 600  # cold or not, the pod holds its GPUs
    assert fleet.gpu_seconds() == 2 * 1200 + 2 * 600
    assert fleet.gpu_seconds(start=MONDAY + timedelta(seconds=600)) == 2 * 600 + 2 * 600


# ----- faults --------------------------------------------------------------------------------------------------------
def test_latency_fault_hits_one_variant_only() -> None:
    fleet = make_fleet(cold_start_s=0)
    fleet.deploy("candidate", STOCK, 1)
    fleet.set_weight(50)
    fleet.advance(60)
    fleet.faults.latency_multiplier["candidate"] = 4.0
    fleet.advance(60)
    before, after = fleet.ticks[0].variants, fleet.ticks[1].variants
    assert after["candidate"].ttft_s == Percentiles(
        p50=before["candidate"].ttft_s.p50 * 4,  # type: ignore[union-attr]
        p95=before["candidate"].ttft_s.p95 * 4,  # type: ignore[union-attr]
        p99=before["candidate"].ttft_s.p99 * 4,  # type: ignore[union-attr]
    )
    assert after["stable"].ttft_s == before["stable"].ttft_s
    assert before["candidate"].good_requests == before["candidate"].requests
    assert after["candidate"].good_requests < 0.8 * after["candidate"].requests
    fleet.faults.clear()
    fleet.advance(60)
    assert fleet.ticks[-1].variants["candidate"].ttft_s == before["candidate"].ttft_s


def test_error_fault_and_traffic_spike() -> None:
    fleet = make_fleet(cold_start_s=0, replicas=4)
    fleet.deploy("candidate", STOCK, 4)
    fleet.set_weight(50)
    fleet.faults.error_rate["candidate"] = 0.2
    fleet.advance(1800)
    cand, stable = totals(fleet.ticks, "candidate"), totals(fleet.ticks, "stable")
    assert cand["errors"] / cand["requests"] == pytest.approx(0.2, abs=0.03)
    assert stable["errors"] == 0
    fleet.faults.clear()
    fleet.faults.traffic_spike = 2.0
    fleet.advance(1800)
    spiked = totals(fleet.ticks[30:])
    calm = totals(fleet.ticks[:30])
    assert spiked["requests"] / calm["requests"] == pytest.approx(2.0, rel=0.05)
    assert fleet.ticks[-1].shape.concurrency == pytest.approx(2 * fleet.ticks[0].shape.concurrency)


# ----- validation ----------------------------------------------------------------------------------------------------
def test_bad_calls_are_rejected() -> None:
    fleet = make_fleet()
    for bad in (-1, 101, 2.5, True):
        with pytest.raises(InvalidInput, match="candidate_weight"):
            fleet.set_weight(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="variant"):
        fleet.deploy("canary", STOCK, 1)
    with pytest.raises(InvalidInput, match="replicas"):
        fleet.deploy("candidate", STOCK, -2)
    with pytest.raises(NotFound):
        fleet.scale("candidate", 1)
    with pytest.raises(InvalidInput, match="seconds"):
        fleet.advance(-1)
    with pytest.raises(InvalidInput, match="cold_start_s"):
        make_fleet(cold_start_s=-5)


# ----- distributions from percentiles ------------------------------------------------------------------------------
def test_fraction_within_interpolates_the_percentiles() -> None:
    p = Percentiles(p50=1.0, p95=2.0, p99=3.0)
    assert fraction_within(p, 1.0) == pytest.approx(0.50)
    assert fraction_within(p, 2.0) == pytest.approx(0.95)
    assert fraction_within(p, 2.5) == pytest.approx(0.97)
    assert fraction_within(p, 3.0) == pytest.approx(0.99)
    assert fraction_within(p, 100.0) == 1.0
    assert fraction_within(p, 0.0) == 0.0
    flat = Percentiles(p50=1.0, p95=1.0, p99=1.0)
    assert fraction_within(flat, 0.999) == 0.0 and fraction_within(flat, 1.0) == 1.0


def test_mixture_quantile() -> None:
    p = Percentiles(p50=1.0, p95=2.0, p99=3.0)
    assert mixture_quantile([(10, p)], 0.95) == pytest.approx(2.0)
    assert mixture_quantile([(5, p), (5, p)], 0.95) == pytest.approx(2.0, rel=1e-6)
    slow = Percentiles(p50=10.0, p95=20.0, p99=30.0)
    mixed = mixture_quantile([(90, p), (10, slow)], 0.95)
    assert mixed is not None and 2.0 < mixed < 20.0
    assert 0.9 * fraction_within(p, mixed) + 0.1 * fraction_within(slow, mixed) == pytest.approx(0.95)
    assert mixture_quantile([], 0.95) is None
    assert mixture_quantile([(0, p)], 0.95) is None


# ----- with the real performance model -----------------------------------------------------------------------------
MODEL, GPU = "nemotron-3-super-nvfp4", "gb300-dgx-station"
#: field note 1's final configuration
TUNED = EngineConfig(
    speculative_method="mtp",
    num_speculative_tokens=1,
    omp_num_threads=1,
    async_scheduling=True,
    mamba_backend="flashinfer",
    mamba_ssm_cache_dtype="float16",
    mamba_cache_stochastic_rounding=True,
)


def real_fleet(profile: str, config: EngineConfig, *, seed: int = 0) -> SimulatedFleet:
    return SimulatedFleet(MODEL, GPU, DiurnalTraffic(seed, profile), FakeClock(MONDAY), seed, stable_config=config)


def test_faster_config_answers_faster_and_has_more_headroom_at_the_same_load() -> None:
    stock, tuned = real_fleet("agents-flat", STOCK), real_fleet("agents-flat", TUNED)
    for fleet in (stock, tuned):
        fleet.advance(1800)
    s, t = stock.ticks[-1].variants["stable"], tuned.ticks[-1].variants["stable"]
    assert s.requests == t.requests  # same seed, same arrivals
    assert s.ttft_s is not None and t.ttft_s is not None and s.tpot_s is not None and t.tpot_s is not None
    assert t.ttft_s.p95 < s.ttft_s.p95
    assert t.tpot_s.p95 < 0.6 * s.tpot_s.p95
    assert t.capacity_tokens_per_s > 1.5 * s.capacity_tokens_per_s
    assert t.spec_acceptance is not None and s.spec_acceptance is None


def test_faster_config_serves_more_tokens_when_stock_saturates() -> None:
    stock, tuned = real_fleet("agents-flat", STOCK), real_fleet("agents-flat", TUNED)
    for fleet in (stock, tuned):
        fleet.faults.traffic_spike = 2.5
        fleet.advance(1800)
    s, t = totals(stock.ticks), totals(tuned.ticks)
    assert s["requests"] == t["requests"]
    assert s["errors"] > 0.1 * s["requests"] and t["errors"] == 0
    assert t["output_tokens"] > 1.3 * s["output_tokens"]
    assert t["good_requests"] > s["good_requests"]


def test_a_simulated_day_of_one_minute_ticks() -> None:
    fleet = SimulatedFleet(MODEL, GPU, DiurnalTraffic(1), FakeClock(MONDAY), 1, stable_config=TUNED, stable_replicas=2)
    fleet.advance(86_400)
    assert len(fleet.ticks) == 1440 and fleet.clock.now() == MONDAY + timedelta(days=1)
    assert fleet.gpu_seconds() == 2 * 86_400
    by_window: dict[str, list[float]] = {}
    for tick in fleet.ticks:
        assert tick.shape.window is not None
        by_window.setdefault(tick.shape.window.name, []).append(tick.variants["stable"].requests)
    assert sum(by_window["day"]) > 50 * sum(by_window["night"])
    night = fleet.ticks[3 * 60].variants["stable"]
    noon = fleet.ticks[13 * 60].variants["stable"]
    assert night.ttft_s is not None and noon.ttft_s is not None and night.tpot_s is not None
    assert noon.tpot_s is not None
    assert night.ttft_s.p95 > noon.ttft_s.p95  # 24k-token prompts
    assert night.tpot_s.p95 < noon.tpot_s.p95  # a handful of streams
    day = totals(fleet.ticks)
    assert day["errors"] == 0 and day["good_requests"] > 0.99 * day["requests"]
