"""The simulated load tester: trials replayed on the replica engine in virtual time."""

from __future__ import annotations

import pytest

from controller.adapters.simulated.loadtester import SimulatedLoadTester, sample_lengths
from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.domain.trial import TrialResult, TrialStatus
from controller.ports import LoadTester, TrialBudget, TrialRequest
from controller.simulator.profiles import load_model, model_names
from controller.trials.loadgen.plan import plan_requests

GPU = "h200"
TARGET = TargetRef(namespace="default", name="chat", model="m")
SHAPE = TrafficShape(
    arrival_rate_rps=4.0,
    concurrency=32,
    prompt_tokens=LengthDistribution(mean=512, cv=0.5),
    output_tokens=LengthDistribution(mean=256, cv=0.5),
)
SLO_ = SLO(ttft_seconds=2.0, tpot_seconds=0.05)
BUDGET = TrialBudget(duration_s=60.0, warmup_s=10.0, max_requests=100_000)


def _mtp_model() -> str:
    for name in model_names():
        if load_model(name).has_mtp:
            return name
    raise AssertionError("no model profile with an MTP head")


@pytest.fixture(scope="module")
def tester() -> SimulatedLoadTester:
    return SimulatedLoadTester(_mtp_model(), GPU)


def _run(
    tester: SimulatedLoadTester,
    config: EngineConfig,
    *,
    shape: TrafficShape = SHAPE,
    seed: int = 0,
    budget: TrialBudget = BUDGET,
) -> TrialResult:
    return tester.run(TrialRequest(target=TARGET, config=config, shape=shape, slo=SLO_, budget=budget, seed=seed))


def test_implements_the_port(tester: SimulatedLoadTester) -> None:
    assert isinstance(tester, LoadTester)


def test_measured_trial_is_consistent(tester: SimulatedLoadTester) -> None:
    r = _run(tester, EngineConfig())
    assert r.status is TrialStatus.MEASURED and r.source == "simulator"
    assert r.duration_s == pytest.approx(BUDGET.duration_s, rel=0.02)
    assert r.completed > 100 and r.failed == 0
    assert r.output_tokens_per_s > 0 and r.total_tokens_per_s > r.output_tokens_per_s
    # Little's law at the trial's concurrency: rate x mean latency ~ streams (p50 e2e as a loose proxy)
    assert r.e2e_s is not None and r.ttft_s is not None and r.tpot_s is not None and r.itl_s is not None
    assert r.request_throughput * r.e2e_s.p50 == pytest.approx(32, rel=0.5)
    # output tokens / requests ~ mean output length
    assert r.output_tokens_per_s / r.request_throughput == pytest.approx(256, rel=0.2)
    assert r.ttft_s.p50 <= r.e2e_s.p50
    assert r.kv_cache_usage is not None and 0 < r.kv_cache_usage <= 1
    assert r.spec_decode is None


def test_goodput_never_exceeds_throughput(tester: SimulatedLoadTester) -> None:
    tight = SLO(ttft_seconds=0.2, tpot_seconds=0.012)
    for slo in (SLO_, tight):
        r = tester.run(TrialRequest(target=TARGET, config=EngineConfig(), shape=SHAPE, slo=slo, budget=BUDGET))
        assert r.goodput_rps <= r.request_throughput + 1e-9
        assert r.goodput_tokens_per_s <= r.output_tokens_per_s + 1e-9


def test_starved_config_ranks_below_a_normal_one(tester: SimulatedLoadTester) -> None:
    normal = _run(tester, EngineConfig())
    starved = _run(tester, EngineConfig(max_num_seqs=1))
    assert starved.status is TrialStatus.MEASURED
    assert starved.output_tokens_per_s < normal.output_tokens_per_s / 2
    assert starved.objective() < normal.objective()
    assert starved.ttft_s is not None and normal.ttft_s is not None
    assert starved.ttft_s.p50 > normal.ttft_s.p50  # requests queue behind the single slot


def test_speculation_reports_acceptance(tester: SimulatedLoadTester) -> None:
    r = _run(tester, EngineConfig(speculative_method="mtp", num_speculative_tokens=3))
    assert r.status is TrialStatus.MEASURED
    spec = r.spec_decode
    assert spec is not None and len(spec.per_position) == 3
    assert list(spec.per_position) == sorted(spec.per_position, reverse=True)
    assert spec.mean_acceptance_length == pytest.approx(1 + sum(spec.per_position), rel=1e-9)
    assert spec.acceptance_rate == pytest.approx(sum(spec.per_position) / 3, rel=1e-9)


def test_infeasible_config_returns_infeasible_with_reason(tester: SimulatedLoadTester) -> None:
    r = _run(tester, EngineConfig(tensor_parallel_size=64))
    assert r.status is TrialStatus.INFEASIBLE
    assert r.reason
    assert r.ttft_s is None and r.output_tokens_per_s == 0 and r.objective() == 0


def test_same_seed_same_result_and_seed_matters(tester: SimulatedLoadTester) -> None:
    config = EngineConfig(speculative_method="mtp", num_speculative_tokens=2)
    a, b, c = (_run(tester, config, seed=s) for s in (7, 7, 8))
    assert a.model_dump() == b.model_dump()
    assert a.model_dump() != c.model_dump()


def test_max_requests_cuts_the_window(tester: SimulatedLoadTester) -> None:
    budget = TrialBudget(duration_s=600.0, warmup_s=5.0, max_requests=200)
    r = _run(tester, EngineConfig(), budget=budget)
    assert r.status is TrialStatus.MEASURED
    assert r.duration_s < 600.0
    assert 200 <= r.completed <= 200 + 32 + 16  # plus warm-up arrivals and the last step's finishes


def test_length_sampling_follows_the_distribution() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    dist = LengthDistribution(mean=400, cv=0.8, maximum=4000)
    lengths = sample_lengths(dist, 200_000, rng)
    assert lengths.min() >= 1 and lengths.max() <= 4000
    assert lengths.mean() == pytest.approx(400, rel=0.03)
    assert lengths.std() / lengths.mean() == pytest.approx(0.8, rel=0.08)
    fixed = sample_lengths(LengthDistribution(mean=128), 10, rng)
    assert set(fixed.tolist()) == {128}


def test_an_overloaded_replica_misses_the_slo_instead_of_reporting_its_lucky_requests(
    tester: SimulatedLoadTester,
) -> None:
    """Far more streams than sequence slots: requests that arrived after warm-up queue behind the others and many
    never see a first token inside the window. They are misses (and their wait so far counts in TTFT); measuring
    only the requests that finished would show the early ones, which started at once, as within the SLO."""
    starved = EngineConfig(max_num_seqs=16)
    light = _run(tester, starved, shape=SHAPE.model_copy(update={"concurrency": 8}))
    flooded = _run(tester, starved, shape=SHAPE.model_copy(update={"concurrency": 2000}))
    assert light.meets_slo()
    assert flooded.status is TrialStatus.MEASURED and not flooded.meets_slo()
    assert flooded.ttft_s is not None and flooded.ttft_s.p95 > SLO_.ttft_seconds
    assert flooded.goodput_rps < 0.2 * flooded.request_throughput
    assert any("still waiting past the TTFT bound" in line for line in flooded.log_tail)


def test_an_open_loop_trial_replays_the_arrival_rate(tester: SimulatedLoadTester) -> None:
    """Open loop: Poisson arrivals at the shape's rate whatever the replica does; a light rate is served as it
    comes, a rate far beyond the replica piles up and misses the TTFT bound."""
    budget = TrialBudget(duration_s=60.0, warmup_s=10.0, max_requests=100_000)

    def run(rate: float) -> TrialResult:
        shape = SHAPE.model_copy(update={"arrival_rate_rps": rate})
        request = TrialRequest(target=TARGET, config=EngineConfig(), shape=shape, slo=SLO_, budget=budget, loop="open")
        return tester.run(request)

    light, flood = run(2.0), run(400.0)
    assert light.meets_slo()
    assert light.request_throughput == pytest.approx(2.0, rel=0.35)
    assert any("open loop" in line for line in light.log_tail)
    assert not flood.meets_slo() and flood.goodput_rps < 0.5 * 400.0


DOCUMENTS = TrafficShape(
    arrival_rate_rps=1.0,
    concurrency=90.0,  # 90 s in system per request
    prompt_tokens=LengthDistribution(mean=24000, cv=0.4, maximum=128000),
    output_tokens=LengthDistribution(mean=1024, cv=0.5, maximum=8192),
    repetitiveness=0.85,
    prefix_share=0.5,
)


@pytest.mark.parametrize(
    ("shape", "warmup", "duration"),
    [
        (SHAPE, 10.0, 120.0),  # 8 s in system: the configured budget already covers it
        (DOCUMENTS, 90.0, 180.0),  # 90 s in system: warm up 90 s, measure 180 s
        (DOCUMENTS.model_copy(update={"concurrency": 9000.0}), 900.0, 1800.0),  # capped at 15 min in system
        (SHAPE.model_copy(update={"arrival_rate_rps": 0.0}), 10.0, 120.0),  # no rate: nothing to derive
    ],
)
def test_a_trial_budget_stretches_to_the_shapes_steady_state(
    shape: TrafficShape, warmup: float, duration: float
) -> None:
    budget = TrialBudget(duration_s=120.0, warmup_s=10.0).for_shape(shape)
    assert (budget.warmup_s, budget.duration_s) == (warmup, duration)


def test_a_short_trial_of_long_requests_overstates_capacity_and_the_stretched_one_does_not() -> None:
    """Open-loop document requests (90 s in system) at 1 req/s on one stock 8B replica: a 10 s warm-up and 120 s
    window measures a replica still filling up and passes; warmed up to the steady state, the same rate breaches."""
    tester = SimulatedLoadTester("llama-3.1-8b", GPU)
    short = TrialBudget(duration_s=120.0, warmup_s=10.0, max_requests=100_000)

    def run(budget: TrialBudget) -> TrialResult:
        return tester.run(
            TrialRequest(target=TARGET, config=EngineConfig(), shape=DOCUMENTS, slo=SLO_, budget=budget, loop="open")
        )

    naive, steady = run(short), run(short.for_shape(DOCUMENTS))
    assert naive.meets_slo()
    assert steady.status is TrialStatus.MEASURED and not steady.meets_slo()
    assert steady.ttft_s is not None and steady.ttft_s.p95 > SLO_.ttft_seconds


@pytest.mark.parametrize("concurrency", [4.0, 4.4, 4.5, 4.6, 0.3])
def test_a_closed_loop_runs_as_many_streams_as_the_trial_runner_would(
    tester: SimulatedLoadTester, concurrency: float
) -> None:
    """Whole streams, as many as the real trial runner's plan keeps in flight (``vllm bench serve
    --max-concurrency``): a capacity probe at 4.4 requests in flight is measured on 5 streams on a canary, and the
    simulated trial must not measure it on 4."""
    shape = SHAPE.model_copy(update={"concurrency": concurrency, "arrival_rate_rps": concurrency / 8})
    streams = plan_requests(shape, num_requests=1, mode="closed").concurrency
    result = _run(tester, EngineConfig(), shape=shape)
    assert result.ok
    assert f"at {streams} concurrent streams" in result.log_tail[0]
