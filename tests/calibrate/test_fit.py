"""The fit recovers known curves from synthetic timings."""

from __future__ import annotations

import math

import pytest

from controller.calibrate.family_fits import (
    best_attention,
    curve,
    fit_attention,
    fit_moe,
    fit_prefill,
    fit_state,
    fit_weight_gemm,
    gemm_bytes,
    gemm_flops,
    line_fit,
)
from controller.calibrate.fit import split_half
from controller.calibrate.profile import Curve
from controller.simulator.profiles import load_gpu

GPU = load_gpu("h200")
PEAK_BW = GPU.hbm_bandwidth_gbs * 1e9
PEAK = GPU.dense_bf16_tflops * 1e12
MATRICES = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]
TOKENS = [1, 2, 4, 8, 16, 64, 256, 1024, 4096]
TRUE_MFU = Curve(x=(64.0, 1024.0, 4096.0), y=(0.3, 0.7, 0.75))


def _gemm_points(bandwidth: float, fixed: float) -> list[dict[str, object]]:
    pts: list[dict[str, object]] = []
    for k, n in MATRICES:
        for m in TOKENS:
            p: dict[str, object] = {"family": "gemm", "matrix": f"{k}x{n}", "tokens": m, "k": k, "n": n}
            t_mem = gemm_bytes(p) / (PEAK_BW * bandwidth)
            t_cmp = gemm_flops(p) / (PEAK * TRUE_MFU.at(m))
            p["seconds"] = fixed + max(t_mem, t_cmp)
            pts.append(p)
    return pts


@pytest.mark.parametrize(
    ("xs", "ys", "a", "b"),
    [([0.0, 1.0, 2.0], [1.0, 3.0, 5.0], 1.0, 2.0), ([1.0, 3.0], [2.0, 2.0], 2.0, 0.0)],
)
def test_line_fit_is_exact_on_a_line(xs: list[float], ys: list[float], a: float, b: float) -> None:
    got_a, got_b = line_fit(xs, ys)
    assert got_a == pytest.approx(a)
    assert got_b == pytest.approx(b)


def test_line_fit_needs_two_distinct_points() -> None:
    with pytest.raises(ValueError, match="two"):
        line_fit([1.0, 1.0], [2.0, 3.0])


@pytest.mark.parametrize(
    ("x", "want"),
    [(0.5, 0.2), (1.0, 0.2), (10.0, 0.5), (100.0, 0.8), (math.sqrt(10.0), 0.35), (1000.0, 0.8)],
)
def test_curve_is_linear_in_log_x_and_flat_beyond_its_ends(x: float, want: float) -> None:
    c = Curve(x=(1.0, 10.0, 100.0), y=(0.2, 0.5, 0.8))
    assert c.at(x) == pytest.approx(want)


def test_curve_averages_points_at_the_same_size() -> None:
    c = curve([(4.0, 0.5), (4.0, 0.7), (2.0, 0.1)])
    assert c.x == (2.0, 4.0)
    assert c.y == pytest.approx((0.1, 0.6))


def test_weight_gemm_fit_recovers_bandwidth_fixed_time_and_mfu() -> None:
    fit = fit_weight_gemm(_gemm_points(0.8, 5e-6), GPU)
    assert fit.bandwidth == pytest.approx(0.8, rel=1e-6)
    assert fit.fixed_s == pytest.approx(5e-6, rel=1e-6)
    for m in (1024, 4096):  # compute-bound for every matrix: the aggregate solve is exact there
        assert fit.mfu.at(m) == pytest.approx(TRUE_MFU.at(m), rel=1e-6)


def test_moe_fit_is_roofline_over_measured_time() -> None:
    pts = [
        {"family": "moe", "tokens": m, "weight_bytes": 1e9, "flops": 2e6 * m, "seconds": 1e9 / PEAK_BW / e}
        for m, e in ((1, 0.5), (16, 0.8), (256, 0.9))
    ]
    fit = fit_moe(pts, GPU)
    assert fit.efficiency.x == (1.0, 16.0, 256.0)
    assert fit.efficiency.y == pytest.approx((0.5, 0.8, 0.9))


def test_attention_fit_recovers_fixed_time_and_bandwidth_per_batch_and_query() -> None:
    eff = {(1, 1): 0.3, (16, 1): 0.8, (1, 4): 0.25, (16, 4): 0.7}
    pts = []
    for (b, q), e in eff.items():
        for ctx in (1024, 4096, 16384):
            kv = 2 * b * ctx * 8 * 128 * 2
            pts.append(
                {
                    "family": "attention",
                    "impl": "sdpa",
                    "batch": b,
                    "context": ctx,
                    "query": q,
                    "kv_bytes": kv,
                    "seconds": 9e-6 + kv / (PEAK_BW * e),
                }
            )
            # a slower second kernel at the same point is ignored
            pts.append({**pts[-1], "impl": "unfused", "seconds": pts[-1]["seconds"] * 2})
    fit = fit_attention(pts, GPU)
    assert fit.fixed_s == pytest.approx(9e-6, rel=1e-6)
    for (b, q), e in eff.items():
        assert fit.efficiency(b, q) == pytest.approx(e, rel=1e-6)
    assert fit.efficiency(16, 2) == pytest.approx(0.8 * 2 / 3 + 0.7 / 3)  # linear in q between 1 and 4


def test_best_attention_keeps_the_faster_kernel_or_one_kernel() -> None:
    a = {"batch": 1, "context": 1024, "query": 1, "impl": "sdpa", "seconds": 2.0}
    b = {**a, "impl": "unfused", "seconds": 1.0}
    assert best_attention([a, b]) == [b]
    assert best_attention([a, b], "sdpa") == [a]


def test_prefill_and_state_fits_are_work_over_time() -> None:
    fresh = [{"family": "prefill_multi", "flops": f, "seconds": f / (PEAK * 0.5)} for f in (1e9, 1e11)]
    cached = [
        {"family": "prefill_chunk", "cached": c, "flops": f, "seconds": f / (PEAK * 0.3)}
        for c, f in ((2048, 1e10), (8192, 1e11))
    ]
    pre = fit_prefill(fresh, cached, GPU)
    assert pre.fresh.y == pytest.approx((0.5, 0.5))
    assert pre.cached.y == pytest.approx((0.3, 0.3))
    st = fit_state(
        [
            {"family": "state", "dtype": "float32", "batch": 4, "bytes": 1e8, "seconds": 1e8 / (PEAK_BW * 0.5)},
            {"family": "state", "dtype": "float16", "batch": 4, "bytes": 1e8, "seconds": 1.0},
        ],
        GPU,
    )
    assert st.efficiency.y == pytest.approx((0.5,))


def test_split_half_alternates_sizes_within_each_shape() -> None:
    pts = _gemm_points(0.8, 5e-6)
    fit, held = split_half(pts)
    assert len(fit) + len(held) == len(pts)
    for k, n in MATRICES:
        name = f"{k}x{n}"
        assert [p["tokens"] for p in fit if p["matrix"] == name] == TOKENS[0::2]
        assert [p["tokens"] for p in held if p["matrix"] == name] == TOKENS[1::2]
