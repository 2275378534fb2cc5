"""The fit of a layer's small kernels and of its GEMMs back to back recovers known timings from synthetic points;
the probe's own count of the stack's layer ops."""

from __future__ import annotations

import pytest

from controller.calibrate.family_fits import (
    STREAMING_TOKENS,
    chain_matrices,
    chain_parts,
    fit_gemm_chain,
    fit_layer_ops,
    predict_gemm_chain,
    predict_layer_ops,
)
from controller.calibrate.fit import errors_by_family, split_half
from controller.calibrate.gpu_probe_layer import layer_ops_bytes_per_token, layer_ops_kernels
from controller.calibrate.profile import Curve, WeightGemm
from controller.simulator.profiles import load_gpu

GPU = load_gpu("h200")
PEAK_BW = GPU.hbm_bandwidth_gbs * 1e9
GRAPH_KERNEL_S = 1e-6
BYTES_PER_TOKEN = 500_000
#: the kernel time of each size, as a multiple of the overhead probe's kernel (efficiency = 1 / multiple); the
#: same at the streaming sizes, where the fit reads the bandwidth off the slope
KERNEL_TIMES = {1: 2.0, 16: 3.0, 64: 2.6, 256: 2.2, 1024: 2.2, 4096: 2.2}


def _ops_points(bandwidth: float) -> list[dict[str, object]]:
    pts: list[dict[str, object]] = []
    for q, kernels in ((1, 22), (2, 24)):
        for tokens, mult in KERNEL_TIMES.items():
            nbytes = tokens * BYTES_PER_TOKEN
            pts.append(
                {
                    "family": "layer_ops",
                    "batch": tokens // q or 1,
                    "query": q,
                    "tokens": tokens,
                    "kernels": kernels,
                    "bytes": nbytes,
                    "seconds": kernels * mult * GRAPH_KERNEL_S + nbytes / (PEAK_BW * bandwidth),
                }
            )
    return pts


@pytest.mark.parametrize("bandwidth", [0.5, 0.8])
def test_layer_ops_fit_recovers_the_bandwidth_and_each_size_kernel_time(bandwidth: float) -> None:
    fit = fit_layer_ops(_ops_points(bandwidth), GPU, GRAPH_KERNEL_S)
    assert fit.bandwidth == pytest.approx(bandwidth, rel=1e-6)
    for tokens, mult in KERNEL_TIMES.items():
        assert fit.kernel_efficiency.at(tokens) == pytest.approx(1.0 / mult, rel=1e-6)
    assert fit.kernels_per_layer == (22.0, 24.0)


def test_layer_ops_prediction_reproduces_the_points_it_was_fitted_on() -> None:
    pts = _ops_points(0.6)
    fit = fit_layer_ops(pts, GPU, GRAPH_KERNEL_S)
    for p in pts:
        assert predict_layer_ops(fit, p, GPU, GRAPH_KERNEL_S) == pytest.approx(p["seconds"], rel=1e-6)


@pytest.mark.parametrize(
    ("tokens", "why"),
    [
        ((1, 16), f"no points of {STREAMING_TOKENS} tokens or more"),
        ((1, 256), "one streaming size only"),
    ],
)
def test_layer_ops_fit_needs_two_streaming_sizes(tokens: tuple[int, ...], why: str) -> None:
    pts = [p for p in _ops_points(0.6) if p["tokens"] in tokens]
    with pytest.raises(ValueError, match="two sizes"):
        fit_layer_ops(pts, GPU, GRAPH_KERNEL_S)


def test_layer_ops_fit_refuses_time_that_falls_as_bytes_grow() -> None:
    pts = _ops_points(0.6)
    for p in pts:
        p["seconds"] = 1e-3 / float(p["tokens"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grow"):
        fit_layer_ops(pts, GPU, GRAPH_KERNEL_S)


GEMM = WeightGemm(bandwidth=0.8, fixed_s=5e-6, mfu=Curve(x=(64.0, 4096.0), y=(0.3, 0.7)))
MATS = "4096x6144,4096x4096,4096x28672,14336x4096"


def _chain_points(slowdown: dict[int, float]) -> list[dict[str, object]]:
    pts: list[dict[str, object]] = []
    for tokens, factor in slowdown.items():
        p: dict[str, object] = {"family": "gemm_chain", "tokens": tokens, "layers": 8, "matrices": MATS}
        p["seconds"] = chain_parts(GEMM, p, GPU) * factor
        pts.append(p)
    return pts


def test_chain_matrices_parse_the_probe_s_field() -> None:
    assert chain_matrices({"matrices": MATS}) == [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]


@pytest.mark.parametrize(
    ("slowdown", "want"),
    [
        ({1: 1.0, 256: 1.0, 4096: 1.0}, (1.0, 1.0, 1.0)),
        ({1: 1.25, 256: 1.0, 4096: 1.1}, (0.8, 1.0, 1 / 1.1)),
    ],
)
def test_gemm_chain_fit_is_the_sum_of_the_gemm_curves_over_the_measured_chain(
    slowdown: dict[int, float], want: tuple[float, ...]
) -> None:
    pts = _chain_points(slowdown)
    fit = fit_gemm_chain(pts, GEMM, GPU)
    assert fit.efficiency.x == tuple(float(t) for t in slowdown)
    assert fit.efficiency.y == pytest.approx(want)
    for p in pts:
        assert predict_gemm_chain(fit, GEMM, p, GPU) == pytest.approx(p["seconds"], rel=1e-9)


def test_split_half_alternates_layer_op_sizes_within_each_query_length() -> None:
    pts = _ops_points(0.6)
    fit, held = split_half(pts)
    sizes = list(KERNEL_TIMES)
    for q in (1, 2):
        assert [p["tokens"] for p in fit if p["query"] == q] == sizes[0::2]
        assert [p["tokens"] for p in held if p["query"] == q] == sizes[1::2]


def test_the_new_families_are_in_the_per_family_errors() -> None:
    from controller.calibrate.profile import load_calibration

    cal = load_calibration("h200")
    assert cal is not None and cal.layer_ops is not None and cal.gemm_chain is not None
    pts = _ops_points(cal.layer_ops.bandwidth) + _chain_points({1: 1.0, 1024: 1.0})
    errs = errors_by_family(cal, pts, GPU)
    assert set(errs) == {"layer_ops", "gemm_chain"}
    assert len(errs["layer_ops"]) == len(KERNEL_TIMES) * 2


@pytest.mark.parametrize(
    ("query", "kernels", "extra_bytes"),
    [(1, 22, 0), (2, 24, 8 * 32 * 128), (8, 24, 8 * 32 * 128)],
)
def test_the_probe_counts_the_stack_s_layer_ops_from_its_code(query: int, kernels: int, extra_bytes: int) -> None:
    assert layer_ops_kernels(query) == kernels
    base = 2 * 36 * 4096 + 8 * 8 * 128 + 12 * 4096 + 10 * 14336
    assert layer_ops_bytes_per_token(4096, 14336, 32, 8, 128, query) == base + extra_bytes
