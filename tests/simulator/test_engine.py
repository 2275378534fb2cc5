"""The replica engine: continuous batching, KV preemption, speculative decoding, determinism, queueing laws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from controller.domain.config import EngineConfig
from controller.simulator.engine import ReplicaEngine, StepResult
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model, model_names

GPU = "h200"
MTP1 = EngineConfig(speculative_method="mtp", num_speculative_tokens=1)
MTP3 = EngineConfig(speculative_method="mtp", num_speculative_tokens=3)


def _mtp_model() -> str:
    for name in model_names():
        if load_model(name).has_mtp:
            return name
    raise AssertionError(f"no shipped model profile has an MTP head: {model_names()}")


def _dense_model() -> str:
    for name in model_names():
        if not load_model(name).has_mamba:
            return name
    raise AssertionError(f"no shipped model profile is a plain transformer: {model_names()}")


@pytest.fixture(scope="module")
def perf() -> PerformanceModel:
    return PerformanceModel(load_model(_mtp_model()), load_gpu(GPU))


@pytest.fixture(scope="module")
def dense_perf() -> PerformanceModel:
    return PerformanceModel(load_model(_dense_model()), load_gpu(GPU))


def _engine(perf: PerformanceModel, config: EngineConfig, **kwargs: object) -> ReplicaEngine:
    engine = ReplicaEngine(perf, config, **kwargs)  # type: ignore[arg-type]
    assert perf.feasibility(config) is None
    return engine


def _load(engine: ReplicaEngine, n: int, *, seed: int = 7, prompt: int = 600, output: int = 200) -> list[int]:
    rng = np.random.default_rng(seed)
    return [
        engine.add_request(int(rng.integers(prompt // 2, prompt * 2)), int(rng.integers(output // 2, output * 2)))
        for _ in range(n)
    ]


def _drain(engine: ReplicaEngine) -> list[StepResult]:
    results: list[StepResult] = []
    while (r := engine.step()) is not None:
        results.append(r)
    return results


def test_same_seed_same_timeline_and_different_seed_differs(perf: PerformanceModel) -> None:
    def run(seed: int) -> tuple[list[tuple[float, float, int]], int]:
        engine = _engine(perf, MTP3, seed=seed)
        ids = _load(engine, 64)
        _drain(engine)
        recs = [engine.record(i) for i in ids]
        return [(r.first_token, r.finished, r.output_tokens) for r in recs], engine.counters.spec_accepted

    a, b, c = run(1), run(1), run(2)
    assert a == b
    assert a != c  # the acceptance draws differ, so the timeline does


def test_every_request_gets_exactly_its_tokens(perf: PerformanceModel) -> None:
    engine = _engine(perf, MTP3, seed=3)
    ids = _load(engine, 100)
    _drain(engine)
    total = 0
    for rid in ids:
        rec = engine.record(rid)
        assert rec.done and rec.finish_reason == "length"
        assert rec.output_tokens == rec.max_tokens
        assert len(rec.token_times) == rec.max_tokens
        assert list(rec.token_times) == sorted(rec.token_times)
        total += rec.max_tokens
    assert engine.counters.generation_tokens == total
    assert engine.counters.prompt_tokens == sum(engine.record(i).prompt_tokens for i in ids)
    assert engine.num_running == engine.num_waiting == 0
    assert engine.kv_usage == 0.0


def test_eos_after_stops_early_with_reason_stop(perf: PerformanceModel) -> None:
    engine = _engine(perf, EngineConfig())
    rid = engine.add_request(50, 100, eos_after=30)
    _drain(engine)
    rec = engine.record(rid)
    assert (rec.output_tokens, rec.finish_reason) == (30, "stop")


def test_max_num_seqs_bounds_the_running_set(perf: PerformanceModel) -> None:
    engine = _engine(perf, EngineConfig(max_num_seqs=4))
    _load(engine, 40)
    running = [r.num_running for r in _drain(engine)]
    assert max(running) == 4
    # requests queue instead: someone waited
    assert any(engine.record(i).queue_time > 0 for i in range(40))


def test_kv_exhaustion_preempts_newest_and_recomputes(dense_perf: PerformanceModel) -> None:
    # 64 blocks of 16 tokens: far less than 16 sequences of ~300 tokens each need
    engine = _engine(dense_perf, EngineConfig(), num_gpu_blocks_override=64)
    ids = [engine.add_request(100, 200) for _ in range(16)]
    results = _drain(engine)
    assert engine.state_blocks == 0
    assert engine.counters.preemptions > 0
    assert sum(r.preemptions for r in results) == engine.counters.preemptions
    assert max(r.kv_usage for r in results) <= 1.0
    recs = [engine.record(i) for i in ids]
    assert all(r.output_tokens == 200 for r in recs)  # recompute loses no output
    assert sum(r.preemptions for r in recs) == engine.counters.preemptions
    # the oldest request is never the victim while newer ones run
    assert recs[0].preemptions == 0
    assert max(r.preemptions for r in recs[1:]) > 0


def test_chunked_prefill_respects_the_token_budget(perf: PerformanceModel) -> None:
    engine = _engine(perf, EngineConfig(max_num_batched_tokens=256, max_num_seqs=64))
    rid = engine.add_request(2000, 4)
    results = _drain(engine)
    assert all(r.prefill_tokens + r.decode_seqs <= 256 for r in results)
    # 2000 prompt tokens need ceil(2000 / 256) = 8 prefill steps before the first token
    first = next(i for i, r in enumerate(results) if len(r.first_token_ids))
    assert first == math.ceil(2000 / 256) - 1
    assert engine.record(rid).output_tokens == 4


def test_speculation_raises_tokens_per_step(perf: PerformanceModel) -> None:
    def tokens_per_decode_step(config: EngineConfig) -> float:
        engine = _engine(perf, config, seed=5)
        _load(engine, 32, output=400)
        results = _drain(engine)
        decode_tokens = sum(int(r.emitted_counts.sum()) - len(r.first_token_ids) for r in results)
        return decode_tokens / sum(r.decode_seqs for r in results)

    plain = tokens_per_decode_step(EngineConfig())
    spec = tokens_per_decode_step(MTP3)
    assert plain == pytest.approx(1.0, abs=0.01)  # only the last step of a request can emit fewer
    assert spec > 1.3


def test_acceptance_counters_match_the_configured_rates(perf: PerformanceModel) -> None:
    engine = _engine(perf, MTP3, seed=11)
    _load(engine, 64, output=500)
    _drain(engine)
    c = engine.counters
    assert c.spec_drafts > 5000
    assert c.spec_draft_tokens == 3 * c.spec_drafts  # every decode step drafted k tokens (budget never binds)
    assert c.spec_accepted == sum(c.spec_accepted_per_pos)
    expected = perf.acceptance(MTP3, 0.0)  # P(draft position i accepted), as vLLM reports it
    assert len(expected) == 3 and list(expected) == sorted(expected, reverse=True)
    for pos, accepted in enumerate(c.spec_accepted_per_pos):
        rate = accepted / c.spec_drafts
        sigma = math.sqrt(expected[pos] * (1 - expected[pos]) / c.spec_drafts)
        assert abs(rate - expected[pos]) <= 4 * sigma + 1e-9, (pos, rate, expected[pos])


def test_latency_ordering_for_every_request(perf: PerformanceModel) -> None:
    engine = _engine(perf, MTP1, seed=2)
    ids = _load(engine, 200)
    _drain(engine)
    for rid in ids:
        r = engine.record(rid)
        assert r.arrival <= r.scheduled <= r.first_token <= r.last_token == r.finished
        assert 0 < r.ttft <= r.e2e
        assert r.tpot >= 0


def test_future_arrivals_and_idle_clock(perf: PerformanceModel) -> None:
    engine = _engine(perf, EngineConfig())
    late = engine.add_request(100, 10, arrival=5.0)
    engine.run_until(4.0)
    assert engine.now == 4.0 and engine.record(late).scheduled != engine.record(late).scheduled  # nan: not yet
    engine.run_until(100.0)
    rec = engine.record(late)
    assert rec.done and rec.scheduled == 5.0 and rec.finished <= 100.0
    assert engine.now == 100.0


def test_littles_law_in_a_closed_loop(perf: PerformanceModel) -> None:
    concurrency, warmup, end = 48, 20.0, 200.0
    engine = _engine(perf, MTP1, seed=4, record_token_times=False)
    rng = np.random.default_rng(0)

    def submit() -> None:
        engine.add_request(int(rng.integers(200, 1200)), int(rng.integers(50, 400)))

    for _ in range(concurrency):
        submit()
    in_system = []
    while engine.now < end:
        result = engine.step()
        assert result is not None
        in_system.append(result.num_running + result.num_waiting + len(result.finished_ids))
        for _ in range(len(result.finished_ids)):
            submit()
    assert set(in_system) == {concurrency}  # a closed loop keeps exactly `concurrency` requests in the system
    cols = engine.finished_arrays()
    window = (cols["finish"] > warmup) & (cols["finish"] <= end)
    throughput = np.count_nonzero(window) / (end - warmup)
    mean_latency = float(np.mean(cols["finish"][window] - cols["arrival"][window]))
    assert throughput * mean_latency == pytest.approx(concurrency, rel=0.1)


def test_hybrid_state_limits_how_many_sequences_fit(perf: PerformanceModel) -> None:
    # a hybrid model holds a fixed-size recurrent state per running sequence on top of its token KV
    engine = _engine(perf, MTP3, num_gpu_blocks_override=None)
    assert engine.state_blocks > 0
    fit = engine.total_blocks // (engine.state_blocks + 1)
    _load(engine, fit + 40, prompt=20, output=10)
    running = [r.num_running for r in _drain(engine)]
    assert max(running) <= fit < engine.max_num_seqs
    assert max(running) >= fit - 2


def test_abort_frees_the_request(perf: PerformanceModel) -> None:
    engine = _engine(perf, EngineConfig(max_num_seqs=1))
    a = engine.add_request(100, 1000)
    b = engine.add_request(100, 10)
    engine.step()
    engine.abort(a)
    assert engine.num_running == 0 and engine.kv_usage == 0.0
    _drain(engine)
    assert engine.record(a).finish_reason == "abort"
    assert engine.record(b).output_tokens == 10
    assert all(engine.finished_arrays()["id"] == [b])


def test_repetitive_requests_accept_more_drafts(perf: PerformanceModel) -> None:
    assert sum(perf.acceptance(MTP3, 1.0)) > sum(perf.acceptance(MTP3, 0.0))
    engine = _engine(perf, MTP3, seed=9)
    plain = [engine.add_request(200, 300, repetitiveness=0.0) for _ in range(20)]
    copying = [engine.add_request(200, 300, repetitiveness=1.0) for _ in range(20)]
    _drain(engine)

    def emissions(ids: list[int]) -> float:
        return float(np.mean([len(set(engine.record(i).token_times)) for i in ids]))

    assert all(engine.record(i).output_tokens == 300 for i in plain + copying)
    assert emissions(copying) < emissions(plain)  # more tokens per step, so fewer steps to the same length


async def test_real_time_driver_publishes_every_token(perf: PerformanceModel) -> None:
    import asyncio

    from controller.simulator.engine import RealTimeDriver

    engine = _engine(perf, MTP1, seed=1)
    driver = RealTimeDriver(engine, speedup=200.0)
    seen: dict[int, int] = {}
    done = asyncio.Event()

    def broken(_engine: ReplicaEngine, _result: StepResult) -> None:
        raise RuntimeError("a broken listener")

    def listen(_engine: ReplicaEngine, result: StepResult) -> None:
        for rid, count in zip(result.emitted_ids.tolist(), result.emitted_counts.tolist(), strict=True):
            seen[rid] = seen.get(rid, 0) + count
        if engine.counters.finished == 8:
            done.set()

    driver.add_listener(broken)
    driver.add_listener(listen)
    driver.start()
    try:
        ids = [driver.submit(100 + 10 * i, 20 + i) for i in range(8)]
        await asyncio.wait_for(done.wait(), timeout=60)
    finally:
        await driver.stop()
    assert seen == {rid: 20 + i for i, rid in enumerate(ids)}
    assert all(engine.record(rid).arrival <= engine.record(rid).first_token for rid in ids)
