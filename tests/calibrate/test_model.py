"""The performance model reading a calibration profile, and the prefill fixes."""

from __future__ import annotations

import pytest

from controller.calibrate.profile import Calibration, Curve, load_calibration
from controller.domain.config import EngineConfig
from controller.simulator import perf
from controller.simulator.perf import PerformanceModel
from controller.simulator.profiles import load_gpu, load_model
from tests.support.builders import shape
from tests.support.calibration import GRAPHED, H200, LLAMA, PEAK_BW, calibration


def _cal(
    *, bandwidth: float = 1.0, gemm_fixed: float = 0.0, att_fixed: float = 0.0, kernel: float = 1e-9
) -> Calibration:
    return calibration(
        bandwidth=bandwidth, gemm_fixed=gemm_fixed, att_fixed=att_fixed, kernel=kernel, cached=Curve(x=(1.0,), y=(0.5,))
    )


def _gpu(
    pm: PerformanceModel, decode: int = 1, ctx: float = 1024, prefill: int = 0, work: float | None = None
) -> float:
    return pm.step(
        GRAPHED, decode_seqs=decode, prefill_tokens=prefill, mean_context_tokens=ctx, prefill_attention_work=work
    ).gpu_seconds


def test_the_switch_is_off_by_default_and_on_it_loads_the_shipped_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    off = PerformanceModel(LLAMA, H200)
    assert off.calibration is None
    assert off.prefill_fixes is False
    monkeypatch.setattr(perf, "CALIBRATED_BY_DEFAULT", True)
    on = PerformanceModel(LLAMA, H200)
    assert on.calibration is not None
    assert on.calibration.gpu == "h200"
    assert on.prefill_fixes is True
    assert PerformanceModel(LLAMA, H200, None).calibration is None  # explicit None: the constants
    other = PerformanceModel(LLAMA, load_gpu("rtx-3090"))
    assert other.calibration is None
    assert other.prefill_fixes is True


def test_without_a_profile_the_model_runs_on_its_constants() -> None:
    assert PerformanceModel.calibrated("llama-3.1-8b", "rtx-3090").calibration is None
    assert PerformanceModel.calibrated("llama-3.1-8b", "h200").calibration is not None


def test_halving_the_measured_weight_bandwidth_adds_one_more_weight_read() -> None:
    fast = PerformanceModel(LLAMA, H200, _cal(bandwidth=0.8))
    slow = PerformanceModel(LLAMA, H200, _cal(bandwidth=0.4))
    weight_bytes = fast.plan(GRAPHED).dense_bytes
    assert _gpu(slow) - _gpu(fast) == pytest.approx(weight_bytes / (PEAK_BW * 0.8), rel=1e-9)


@pytest.mark.parametrize(
    ("field", "per_step"),
    [
        ("gemm_fixed", 4 * 32 + 1),  # qkv, o, gate_up, down per layer and the lm_head
        ("att_fixed", 32),  # one attention kernel per layer
    ],
)
def test_fixed_kernel_times_add_once_per_kernel(field: str, per_step: int) -> None:
    base = PerformanceModel(LLAMA, H200, _cal())
    more = PerformanceModel(LLAMA, H200, _cal(**{field: 5e-6}))
    assert _gpu(more) - _gpu(base) == pytest.approx(per_step * 5e-6, rel=1e-9)


def test_small_kernels_per_layer_cost_the_measured_graph_kernel_time() -> None:
    a = PerformanceModel(LLAMA, H200, _cal(kernel=2e-6), small_kernels_per_layer=6)
    b = PerformanceModel(LLAMA, H200, _cal(kernel=2e-6), small_kernels_per_layer=10)
    assert _gpu(b) - _gpu(a) == pytest.approx(4 * 32 * 2e-6, rel=1e-9)


def test_the_h200_calibration_makes_small_batches_slower_and_keeps_large_ones_close() -> None:
    cal = load_calibration("h200")
    assert cal is not None
    unc = PerformanceModel(LLAMA, H200, None, prefill_fixes=False)
    calm = PerformanceModel(LLAMA, H200, cal)
    small = _gpu(calm, decode=1) / _gpu(unc, decode=1)
    large = _gpu(calm, decode=256) / _gpu(unc, decode=256)
    assert small > 1.2  # the constants were too fast by 20-40% at 1-16 sequences
    assert abs(large - 1.0) < abs(small - 1.0)


def test_with_prefill_fixes_a_chunk_on_a_cached_context_costs_more_than_a_fresh_one() -> None:
    pm = PerformanceModel(LLAMA, H200, _cal(), prefill_fixes=True)
    chunk = 2048
    fresh = _gpu(pm, decode=0, prefill=chunk, work=chunk * chunk / 2)
    on_cache = _gpu(pm, decode=0, prefill=chunk, work=chunk * (16384 + chunk / 2))
    per_pair = 32 * 4 * 32 * 128 / (H200.dense_bf16_tflops * 1e12)  # layers x FLOPs per (query, key) pair / peak
    want = per_pair * (chunk * (16384 + chunk / 2) / 0.5 - chunk * chunk / 2 / 1.0)  # cached curve 0.5, fresh 1.0
    assert on_cache - fresh == pytest.approx(want, rel=1e-9)
    off = PerformanceModel(LLAMA, H200, _cal(), prefill_fixes=False)  # fixes off: the work argument is ignored
    assert _gpu(off, decode=0, prefill=chunk, work=chunk * (16384 + chunk / 2)) == pytest.approx(fresh)


def test_with_prefill_fixes_several_sequences_attend_separately() -> None:
    pm = PerformanceModel(LLAMA, H200, None, prefill_fixes=True)
    tokens = 8192
    one = _gpu(pm, decode=0, prefill=tokens, work=tokens * tokens / 2)
    eight = _gpu(pm, decode=0, prefill=tokens, work=8 * (tokens / 8) ** 2 / 2)
    assert eight < one


def test_a_single_stream_tpot_excludes_its_own_prefill_with_the_fixes() -> None:
    cfg = EngineConfig(speculative_method="ngram", num_speculative_tokens=7)
    traffic = shape(0.0, 1, 25000, 400, repetitiveness=0.9)
    model, gpu = load_model("qwen3.6-27b-int4"), load_gpu("rtx-3090")
    for fixes, lo, hi in ((False, 3.0, 100.0), (True, 0.8, 1.05)):
        pm = PerformanceModel(model, gpu, None, prefill_fixes=fixes)
        st = pm.step(cfg, decode_seqs=1, prefill_tokens=0, mean_context_tokens=25200, repetitiveness=0.9)
        per_token = st.seconds / st.tokens_per_seq
        assert lo <= pm.estimate(cfg, traffic).tpot_s.p50 / per_token <= hi
