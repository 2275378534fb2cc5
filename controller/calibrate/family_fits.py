"""Each kernel family's fit and prediction, from the probe's points (CPU side, pure).

Each kernel family gets the simplest form its measurements support (see docs/simulator.md, "Calibration"):
* weight GEMMs: a fixed time per GEMM plus ``max(bytes / bandwidth, flops / (peak * mfu(tokens)))``; the bandwidth
  and the fixed time come from a straight line through the memory-bound points (16 tokens or fewer), ``mfu`` at each
  token count from the sum over the layer's matrices;
* MoE expert GEMMs: roofline time over the measured time, against tokens in the pass;
* decode attention: the faster of the probe's two kernels per point; a fixed time per layer plus KV bytes over a
  bandwidth that depends on the number of sequences and the query length;
* prefill attention: FLOPs over the measured time against FLOPs per layer pass, for fresh prompts and for chunks
  on a cached context;
* Mamba state: bytes over time against sequences (float32 state);
* kernel overhead: as measured;
* a layer's small kernels together: a bandwidth from the slope of time against bytes at streaming sizes, and
  each kernel's time (what the bytes do not explain) against tokens, as the overhead kernel's time over it;
* a layer's GEMMs back to back: the weight-GEMM curves' sum over the measured time, against tokens.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from controller.simulator.calibration_profile import (
    Curve,
    DecodeAttention,
    GemmChain,
    LayerOps,
    MoeGemm,
    PrefillAttention,
    StateTraffic,
    WeightGemm,
)
from controller.simulator.profiles import GpuProfile

Point = dict[str, Any]
#: Points at or below this many tokens are memory-bound for every weight matrix on any current GPU.
MEMORY_BOUND_TOKENS = 16
MAX_EFFICIENCY = 1.5
#: Layer-op points at or above this many tokens stream their bytes: the slope of time against bytes there is the
#: bandwidth of a layer's small kernels.
STREAMING_TOKENS = 256


def _clamp(v: float) -> float:
    return min(MAX_EFFICIENCY, max(1e-3, v))


def curve(pairs: Iterable[tuple[float, float]]) -> Curve:
    """A curve through ``(x, efficiency)`` pairs; pairs at the same x are averaged."""
    by_x: dict[float, list[float]] = defaultdict(list)
    for x, y in pairs:
        by_x[float(x)].append(y)
    xs = sorted(by_x)
    return Curve(x=tuple(xs), y=tuple(_clamp(statistics.fmean(by_x[x])) for x in xs))


def line_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``: returns ``(a, b)``."""
    n = len(xs)
    if n < 2:
        raise ValueError("a line needs two points")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("a line needs two distinct x values")
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - b * mx, b


def gemm_bytes(p: Point) -> float:
    m, k, n = p["tokens"], p["k"], p["n"]
    return float((k * n + m * k + m * n) * 2)


def gemm_flops(p: Point) -> float:
    return float(2 * p["tokens"] * p["k"] * p["n"])


def fit_weight_gemm(points: Sequence[Point], gpu: GpuProfile) -> WeightGemm:
    peak_bw, peak = gpu.hbm_bandwidth_gbs * 1e9, gpu.dense_bf16_tflops * 1e12
    mem = [p for p in points if p["tokens"] <= MEMORY_BOUND_TOKENS]
    if len(mem) < 2:
        raise ValueError("weight GEMM fit needs at least two memory-bound points")
    fixed, slope = line_fit([gemm_bytes(p) for p in mem], [p["seconds"] for p in mem])
    fixed = max(0.0, fixed)
    bw = 1.0 / slope
    by_tokens: dict[int, list[Point]] = defaultdict(list)
    for p in points:
        by_tokens[p["tokens"]].append(p)
    pairs: list[tuple[float, float]] = []
    for m, group in sorted(by_tokens.items()):
        if m <= MEMORY_BOUND_TOKENS:
            continue
        measured = sum(p["seconds"] for p in group)
        t_mem = sum(gemm_bytes(p) for p in group) / bw
        flops = sum(gemm_flops(p) for p in group)
        compute = measured - fixed * len(group)
        if compute <= t_mem * 1.02:  # memory-bound: compute efficiency is not seen at this size
            continue
        pairs.append((m, flops / (peak * compute)))
    if not pairs:
        pairs = [(1.0, 1.0)]
    return WeightGemm(bandwidth=bw / peak_bw, fixed_s=fixed, mfu=curve(pairs))


def predict_gemm(fit: WeightGemm, p: Point, gpu: GpuProfile) -> float:
    peak_bw, peak = gpu.hbm_bandwidth_gbs * 1e9, gpu.dense_bf16_tflops * 1e12
    return fit.fixed_s + max(
        gemm_bytes(p) / (peak_bw * fit.bandwidth), gemm_flops(p) / (peak * fit.mfu.at(p["tokens"]))
    )


def _moe_roofline(p: Point, gpu: GpuProfile) -> float:
    return max(
        float(p["weight_bytes"]) / (gpu.hbm_bandwidth_gbs * 1e9), float(p["flops"]) / (gpu.dense_bf16_tflops * 1e12)
    )


def fit_moe(points: Sequence[Point], gpu: GpuProfile) -> MoeGemm:
    return MoeGemm(efficiency=curve((p["tokens"], _moe_roofline(p, gpu) / p["seconds"]) for p in points))


def predict_moe(fit: MoeGemm, p: Point, gpu: GpuProfile) -> float:
    return _moe_roofline(p, gpu) / fit.efficiency.at(p["tokens"])


def best_attention(points: Sequence[Point], impl: str | None = None) -> list[Point]:
    """The faster kernel at each (sequences, context, query), or only ``impl``'s points."""
    best: dict[tuple[int, int, int], Point] = {}
    for p in points:
        if impl is not None and p.get("impl") != impl:
            continue
        key = (p["batch"], p["context"], p["query"])
        if key not in best or p["seconds"] < best[key]["seconds"]:
            best[key] = p
    return list(best.values())


def fit_attention(points: Sequence[Point], gpu: GpuProfile, impl: str | None = None) -> DecodeAttention:
    peak_bw = gpu.hbm_bandwidth_gbs * 1e9
    pts = best_attention(points, impl)
    groups: dict[tuple[int, int], list[Point]] = defaultdict(list)
    for p in pts:
        groups[(p["query"], p["batch"])].append(p)
    intercepts = []
    for group in groups.values():
        if len({p["kv_bytes"] for p in group}) >= 2:
            a, _ = line_fit([p["kv_bytes"] for p in group], [p["seconds"] for p in group])
            intercepts.append(a)
    fixed = max(0.0, statistics.median(intercepts)) if intercepts else 0.0
    per_q: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for (q, b), group in groups.items():
        num = sum(p["kv_bytes"] * max(1e-9, p["seconds"] - fixed) for p in group)
        den = sum(p["kv_bytes"] ** 2 for p in group)
        slope = num / den
        per_q[q].append((b, 1.0 / (slope * peak_bw)))
    return DecodeAttention(fixed_s=fixed, bandwidth={q: curve(v) for q, v in sorted(per_q.items())})


def predict_attention(fit: DecodeAttention, p: Point, gpu: GpuProfile) -> float:
    eff = fit.efficiency(p["batch"], p["query"])
    return fit.fixed_s + float(p["kv_bytes"]) / (gpu.hbm_bandwidth_gbs * 1e9 * eff)


def _prefill_eff(p: Point, gpu: GpuProfile) -> float:
    return float(p["flops"]) / (float(p["seconds"]) * gpu.dense_bf16_tflops * 1e12)


def fit_prefill(fresh: Sequence[Point], cached: Sequence[Point], gpu: GpuProfile) -> PrefillAttention:
    fresh_pts = list(fresh) + [p for p in cached if p["cached"] == 0]
    cached_pts = [p for p in cached if p["cached"] > 0] or fresh_pts
    return PrefillAttention(
        fresh=curve((p["flops"], _prefill_eff(p, gpu)) for p in fresh_pts),
        cached=curve((p["flops"], _prefill_eff(p, gpu)) for p in cached_pts),
    )


def predict_prefill(fit: PrefillAttention, p: Point, gpu: GpuProfile) -> float:
    c = fit.cached if p.get("cached", 0) > 0 else fit.fresh
    return float(p["flops"]) / (gpu.dense_bf16_tflops * 1e12 * c.at(p["flops"]))


def fit_state(points: Sequence[Point], gpu: GpuProfile) -> StateTraffic:
    peak_bw = gpu.hbm_bandwidth_gbs * 1e9
    pts = [p for p in points if p["dtype"] == "float32"] or list(points)
    return StateTraffic(efficiency=curve((p["batch"], p["bytes"] / (p["seconds"] * peak_bw)) for p in pts))


def predict_state(fit: StateTraffic, p: Point, gpu: GpuProfile) -> float:
    return float(p["bytes"]) / (gpu.hbm_bandwidth_gbs * 1e9 * fit.efficiency.at(p["batch"]))


def fit_layer_ops(points: Sequence[Point], gpu: GpuProfile, graph_kernel_s: float) -> LayerOps:
    """Bandwidth from the streaming points' slope; per-kernel time (the rest) against tokens, as an efficiency
    relative to the overhead probe's kernel."""
    peak_bw = gpu.hbm_bandwidth_gbs * 1e9
    stream = [p for p in points if p["tokens"] >= STREAMING_TOKENS]
    if len({p["bytes"] for p in stream}) < 2:
        raise ValueError(f"layer-op fit needs points at two sizes of {STREAMING_TOKENS} tokens or more")
    _, slope = line_fit([float(p["bytes"]) for p in stream], [float(p["seconds"]) for p in stream])
    if slope <= 0:
        raise ValueError("layer-op time does not grow with the bytes moved")
    bw = 1.0 / slope
    pairs = []
    for p in points:
        per_kernel = (p["seconds"] - p["bytes"] / bw) / p["kernels"]
        if per_kernel > 0:
            pairs.append((p["tokens"], graph_kernel_s / per_kernel))
    if not pairs:
        pairs = [(1.0, 1.0)]
    return LayerOps(
        kernel_efficiency=curve(pairs),
        bandwidth=min(1.2, bw / peak_bw),
        kernels_per_layer=tuple(sorted({float(p["kernels"]) for p in points})),
    )


def predict_layer_ops(fit: LayerOps, p: Point, gpu: GpuProfile, graph_kernel_s: float) -> float:
    kernels = float(p["kernels"]) * graph_kernel_s / fit.kernel_efficiency.at(p["tokens"])
    return kernels + float(p["bytes"]) / (gpu.hbm_bandwidth_gbs * 1e9 * fit.bandwidth)


def chain_matrices(p: Point) -> list[tuple[int, int]]:
    """The ``k x n`` matrices of a GEMM-chain point (``"4096x6144,4096x4096,..."``)."""
    out = []
    for item in str(p["matrices"]).split(","):
        k, n = item.split("x")
        out.append((int(k), int(n)))
    return out


def chain_parts(fit: WeightGemm, p: Point, gpu: GpuProfile) -> float:
    """The weight-GEMM curves' time for each matrix of a chain point, summed."""
    return sum(predict_gemm(fit, {"tokens": p["tokens"], "k": k, "n": n}, gpu) for k, n in chain_matrices(p))


def fit_gemm_chain(points: Sequence[Point], gemm: WeightGemm, gpu: GpuProfile) -> GemmChain:
    return GemmChain(efficiency=curve((p["tokens"], chain_parts(gemm, p, gpu) / p["seconds"]) for p in points))


def predict_gemm_chain(fit: GemmChain, gemm: WeightGemm, p: Point, gpu: GpuProfile) -> float:
    return chain_parts(gemm, p, gpu) / fit.efficiency.at(p["tokens"])
