"""A calibration profile for the performance model's tests: the test device's flat curves, with what a test varies
(the weight bandwidth, the fixed kernel times, the layer primitives) as keyword arguments."""

from __future__ import annotations

from controller.calibrate.profile import (
    Calibration,
    Ceilings,
    Curve,
    DecodeAttention,
    GemmChain,
    KernelOverhead,
    LayerOps,
    MeasuredOn,
    PrefillAttention,
    WeightGemm,
)
from controller.domain.config import EngineConfig
from controller.simulator.profiles import load_gpu, load_model

LLAMA = load_model("llama-3.1-8b")
H200 = load_gpu("h200")
PEAK_BW = H200.hbm_bandwidth_gbs * 1e9
FLAT = Curve(x=(1.0,), y=(1.0,))
GRAPHED = EngineConfig(max_cudagraph_capture_size=512)


def calibration(
    *,
    bandwidth: float = 1.0,
    gemm_fixed: float = 0.0,
    att_fixed: float = 0.0,
    kernel: float = 1e-9,
    cached: Curve = FLAT,
    layer_ops: LayerOps | None = None,
    gemm_chain: GemmChain | None = None,
) -> Calibration:
    """An H200 profile measured on a test device: every ceiling 1, flat curves; ``bandwidth`` is the weight GEMMs'
    share of the peak, ``gemm_fixed`` and ``att_fixed`` their fixed times, ``kernel`` a graphed kernel's launch (an
    eager one takes ten times that), ``cached`` the prefill attention over cached context."""
    return Calibration(
        gpu="h200",
        measured_on=MeasuredOn(device="test", date="2026-01-01T00:00:00Z", torch="", cuda="", probe_seconds=0.0),
        ceilings=Ceilings(copy_gbs=1.0, read_gbs=1.0, gemm_tflops=1.0),
        activation_bandwidth=1.0,
        weight_gemm=WeightGemm(bandwidth=bandwidth, fixed_s=gemm_fixed, mfu=FLAT),
        decode_attention=DecodeAttention(fixed_s=att_fixed, bandwidth={1: FLAT}),
        prefill_attention=PrefillAttention(fresh=FLAT, cached=cached),
        overhead=KernelOverhead(graph_kernel_s=kernel, eager_kernel_s=10 * kernel),
        layer_ops=layer_ops,
        gemm_chain=gemm_chain,
    )
