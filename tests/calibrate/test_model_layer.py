"""The calibrated model times small kernels, activations and dense GEMMs from the layer primitives when the
profile has them, and as before when it does not."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.calibrate.profile import Calibration, Curve, GemmChain, LayerOps, load_calibration
from controller.simulator.perf import PerformanceModel
from tests.support.calibration import FLAT, GRAPHED, H200, LLAMA, PEAK_BW, calibration

KERNEL_S = 2e-6
GEMM_FIXED_S = 5e-6
SMALL_KERNELS = 6 * 32  # per layer x layers
GEMM_KERNELS = 4 * 32 + 1


def _cal(layer_ops: LayerOps | None = None, gemm_chain: GemmChain | None = None) -> Calibration:
    return calibration(
        bandwidth=0.8, gemm_fixed=GEMM_FIXED_S, kernel=KERNEL_S, layer_ops=layer_ops, gemm_chain=gemm_chain
    )


def _ops(efficiency: Curve = FLAT, bandwidth: float = 1.0) -> LayerOps:
    return LayerOps(kernel_efficiency=efficiency, bandwidth=bandwidth)


def _gpu(cal: Calibration, decode: int) -> float:
    pm = PerformanceModel(LLAMA, H200, cal)
    return pm.step(GRAPHED, decode_seqs=decode, prefill_tokens=0, mean_context_tokens=1024).gpu_seconds


def _act_s(decode: int) -> float:
    """Activation and new-KV bytes of ``decode`` tokens at the datasheet bandwidth."""
    p = PerformanceModel(LLAMA, H200, _cal()).plan(GRAPHED)
    return decode * (p.act_bytes_per_token + p.kv_bytes_per_token) / PEAK_BW


def _weights_s() -> float:
    """One memory-bound pass over the dense weights plus the GEMMs' fixed times, on the test profile."""
    p = PerformanceModel(LLAMA, H200, _cal()).plan(GRAPHED)
    return p.dense_bytes / (PEAK_BW * 0.8) + GEMM_KERNELS * GEMM_FIXED_S


CASES: list[tuple[str, LayerOps | None, GemmChain | None, int, Callable[[], float]]] = [
    ("no layer primitives: as before", None, None, 1, lambda: 0.0),
    ("the overhead kernel's own time", _ops(), None, 1, lambda: 0.0),
    (
        "a layer kernel twice the overhead kernel",
        _ops(Curve(x=(1.0,), y=(0.5,))),
        None,
        1,
        lambda: SMALL_KERNELS * KERNEL_S,
    ),
    (
        "kernel time by tokens: 4x at 256 tokens",
        _ops(Curve(x=(1.0, 256.0), y=(1.0, 0.25))),
        None,
        256,
        lambda: 3 * SMALL_KERNELS * KERNEL_S,
    ),
    ("kernel time by tokens: as measured at 1 token", _ops(Curve(x=(1.0, 256.0), y=(1.0, 0.25))), None, 1, lambda: 0.0),
    ("activations at half the copy bandwidth", _ops(bandwidth=0.5), None, 64, lambda: _act_s(64)),
    (
        "GEMMs back to back at 0.8 of their sum",
        None,
        GemmChain(efficiency=Curve(x=(1.0,), y=(0.8,))),
        1,
        lambda: _weights_s() / 4,
    ),
    ("GEMMs back to back as their sum", None, GemmChain(efficiency=FLAT), 1, lambda: 0.0),
]


@pytest.mark.parametrize(("name", "ops", "chain", "decode", "extra"), CASES, ids=[c[0] for c in CASES])
def test_the_model_adds_what_the_layer_primitives_measured(
    name: str, ops: LayerOps | None, chain: GemmChain | None, decode: int, extra: Callable[[], float]
) -> None:
    got = _gpu(_cal(ops, chain), decode) - _gpu(_cal(), decode)
    assert got == pytest.approx(extra(), rel=1e-9, abs=1e-12)


def test_the_shipped_h200_layer_kernels_take_longer_than_the_overhead_kernel_alone() -> None:
    cal = load_calibration("h200")
    assert cal is not None and cal.layer_ops is not None
    without = cal.model_copy(update={"layer_ops": None})
    for decode in (1, 16, 256):
        assert _gpu(cal, decode) > _gpu(without, decode)
