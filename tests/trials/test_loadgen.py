"""The load generator: planning (seeded, distribution-faithful) and measuring (against a fast fake engine)."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from controller.domain.slo import SLO
from controller.domain.traffic import LengthDistribution, TrafficShape
from controller.trials.loadgen.replay import LoadGenerator, plan_requests, run_plan, sample_lengths
from tests.support.builders import shape


def test_same_seed_same_request_sequence(small_shape: TrafficShape) -> None:
    a = plan_requests(small_shape, num_requests=50, seed=7, max_model_len=512)
    b = plan_requests(small_shape, num_requests=50, seed=7, max_model_len=512)
    c = plan_requests(small_shape, num_requests=50, seed=8, max_model_len=512)
    assert a == b
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != c.fingerprint()


def test_lengths_follow_the_lognormal_and_caps() -> None:
    rng = np.random.default_rng(0)
    dist = LengthDistribution(mean=200, cv=0.5)
    xs = np.array(sample_lengths(dist, 20_000, rng))
    assert abs(xs.mean() - 200) / 200 < 0.03
    assert abs(xs.std() / xs.mean() - 0.5) < 0.05
    capped = sample_lengths(LengthDistribution(mean=200, cv=0.5, maximum=300), 5000, rng, cap=250)
    assert max(capped) == 250 and min(capped) >= 1
    assert sample_lengths(LengthDistribution(mean=17, cv=0), 5, rng) == [17] * 5


def test_prompts_have_exact_token_counts_and_fit_the_context() -> None:
    traffic = shape(0, 4, 400, 100).model_copy(
        update={
            "prompt_tokens": LengthDistribution(mean=400, cv=1.0),
            "output_tokens": LengthDistribution(mean=100, cv=1.0),
        }
    )
    plan = plan_requests(traffic, num_requests=300, seed=1, max_model_len=512, token_id_range=(300, 4000))
    for r in plan.requests:
        assert r.prompt_tokens + r.max_tokens <= 512
        assert all(300 <= t < 4000 for t in r.prompt_token_ids)


def test_repetitive_share_and_shared_prefix() -> None:
    traffic = shape(0, 4, 64, 8, repetitiveness=0.25).model_copy(update={"prefix_share": 0.5})
    plan = plan_requests(traffic, num_requests=400, seed=3)
    share = sum(r.repetitive for r in plan.requests) / 400
    assert 0.18 < share < 0.32
    prefixes = {r.prompt_token_ids[:32] for r in plan.requests}
    assert len(prefixes) == 1  # the first half of every prompt is the shared prefix
    rep = next(r for r in plan.requests if r.repetitive)
    body = rep.prompt_token_ids[32:]
    assert len(set(body)) <= 8  # a short motif, repeated
    plain = next(r for r in plan.requests if not r.repetitive)
    assert len(set(plain.prompt_token_ids[32:])) > 16


def test_open_loop_arrivals_are_poisson_at_the_rate() -> None:
    traffic = shape(20, 5, 16, 8)
    plan = plan_requests(traffic, num_requests=4000, seed=5)
    assert plan.mode == "open"
    times = np.array([r.send_at_s for r in plan.requests])
    gaps = np.diff(times)
    assert abs(gaps.mean() - 1 / 20) / (1 / 20) < 0.05
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.06  # exponential gaps: cv 1
    bursty = plan_requests(traffic, num_requests=4000, seed=5, burstiness=0.25)
    bgaps = np.diff([r.send_at_s for r in bursty.requests])
    assert bgaps.std() / bgaps.mean() > 1.7  # gamma(k=0.25): cv 2


def test_closed_loop_measures_every_request(fake_engine, small_shape: TrafficShape) -> None:
    plan = plan_requests(small_shape, num_requests=40, seed=2, max_model_len=512)
    report = run_plan(fake_engine.endpoint, "fake", plan)
    assert len(report.completed) == 40 and not report.failed
    assert report.max_in_flight == 8
    for rec, req in zip(report.records, plan.requests, strict=True):
        assert rec.output_tokens == req.max_tokens
        assert rec.prompt_tokens == req.prompt_tokens
        assert 0 < rec.ttft_s <= rec.e2e_s
        assert len(rec.itl_s) == rec.output_tokens - 1
    summary = report.summary(SLO())
    assert summary.output_tokens == plan.requested_output_tokens
    assert math.isclose(summary.request_throughput, 40 / report.duration_s)
    assert math.isclose(summary.output_tokens_per_s, summary.output_tokens / report.duration_s)
    assert summary.ttft_s is not None and summary.e2e_s is not None
    assert summary.ttft_s.p50 <= summary.e2e_s.p50
    # the server saw exactly the planned prompts
    assert sorted(map(tuple, fake_engine.state.prompts)) == sorted(r.prompt_token_ids for r in plan.requests)


def test_errors_are_counted_not_raised(make_fake_engine, small_shape: TrafficShape) -> None:
    with make_fake_engine() as engine:
        engine.state.fail_every = 4
        report = run_plan(engine.endpoint, "fake", plan_requests(small_shape, num_requests=20, seed=1))
    assert len(report.failed) == 5 and len(report.completed) == 15
    assert all("HTTP 500" in r.error for r in report.failed)


def test_cancel_stops_the_run(make_fake_engine, small_shape: TrafficShape) -> None:
    with make_fake_engine() as engine:
        engine.state.token_delay_s = 0.05  # 32 tokens: ~1.6 s per request
        plan = plan_requests(small_shape, num_requests=200, seed=1)

        async def go() -> tuple[int, bool]:
            cancel = asyncio.Event()
            gen = LoadGenerator(engine.endpoint, "fake")
            task = asyncio.create_task(gen.run(plan, cancel=cancel))
            await asyncio.sleep(0.3)
            cancel.set()
            report = await task
            return len(report.records), report.cancelled

        recorded, cancelled = asyncio.run(go())
    assert cancelled
    assert recorded < 200


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_duration_cap_stops_issuing(make_fake_engine, mode: str) -> None:
    traffic = shape(50, 4, 8, 4)
    with make_fake_engine() as engine:
        plan = plan_requests(traffic, num_requests=10_000, seed=1, mode=mode)  # type: ignore[arg-type]
        report = run_plan(engine.endpoint, "fake", plan, max_duration_s=0.5)
    assert 0 < len(report.records) < 10_000
    assert not report.failed
