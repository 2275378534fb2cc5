"""Server-side deltas from two /metrics expositions (the format vLLM serves)."""

from __future__ import annotations

import pytest

from controller.errors import MetricsUnavailable
from controller.trials.verdict.metrics_delta import delta, parse_metrics, scrape


def exposition(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float], preempt: float,
               kv: float, spec: bool = True) -> str:  # fmt: skip
    lines = [
        "# HELP vllm:num_preemptions Cumulative number of preemption from the engine.",
        "# TYPE vllm:num_preemptions counter",
        f'vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempt}',
        'vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e9',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}',
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {accepted * 2}',
        f'vllm:generation_tokens_total{{engine="1",model_name="m"}} {accepted}',
    ]
    if spec:
        lines += [
            "# TYPE vllm:spec_decode_num_drafts counter",
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{i}"}} {v}'
            for i, v in enumerate(per_pos)
        ]
    return "\n".join(lines) + "\n"


def test_spec_decode_deltas() -> None:
    before = parse_metrics(exposition(10, 30, 20, [9, 7, 4], 1, 0.1))
    after = parse_metrics(exposition(110, 330, 170, [89, 57, 24], 4, 0.3))
    d = delta(before, after, kv_peak=0.6)
    assert d.spec_enabled
    assert (d.drafts, d.draft_tokens, d.accepted_tokens) == (100, 300, 150)
    assert d.accepted_per_position == (80, 50, 20)
    assert d.preemptions == 3
    assert d.generation_tokens == 450  # summed over both engines
    assert d.kv_cache_usage_peak == 0.6
    stats = d.spec_decode()
    assert stats is not None
    assert stats.acceptance_rate == pytest.approx(0.5)
    assert stats.mean_acceptance_length == pytest.approx(2.5)
    assert stats.per_position == pytest.approx((0.8, 0.5, 0.2))


def test_no_spec_fields_without_speculation() -> None:
    before = parse_metrics(exposition(0, 0, 5, [], 0, 0.0, spec=False))
    after = parse_metrics(exposition(0, 0, 9, [], 0, 0.2, spec=False))
    d = delta(before, after)
    assert not d.spec_enabled
    assert d.spec_decode() is None
    assert d.kv_cache_usage_peak == 0.2  # no sampled peak: the last gauge value


def test_garbage_and_unreachable_are_metrics_unavailable() -> None:
    with pytest.raises(MetricsUnavailable):
        parse_metrics("vllm:x{{{ 1\n")
    with pytest.raises(MetricsUnavailable):
        scrape("http://127.0.0.1:9", timeout_s=1)
